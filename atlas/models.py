"""The atlas's data: works, their multi-valued facets, suggestions and data versions.

Single-valued facets are plain indexed columns. Multi-valued facets (and free topics)
are rows of ``WorkTag`` so that filtering and counting are ordinary joins and
``GROUP BY`` on every database, with no JSON operators that SQLite lacks.
"""

import functools
import json
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.urls import get_script_prefix, reverse
from django.utils.functional import cached_property

from atlas import taxonomy
from atlas.records import FIELD_RULES, RecordError
from atlas.search import SearchDocument, SearchDocumentField, url_words

TOPIC = "topics"
TAG_FACETS = (*(facet.name for facet in taxonomy.MULTI_FACETS), TOPIC)


class ReadableJSONEncoder(json.JSONEncoder):
    """Keeps non-ASCII names as they are, so SQLite's search column can match them."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**{**kwargs, "ensure_ascii": False})


class Confidence(models.TextChoices):
    HIGH = "high", "High"
    MEDIUM = "medium", "Medium"
    LOW = "low", "Low"


class TagReads:
    """A work's multi-valued facets; works from ``selectors.work_queryset()`` carry their
    tags aggregated as ``tags_text`` ("facet=value ...")."""

    def tag_values(self, facet: str) -> list[str]:
        """One multi-valued facet's values, in vocabulary order (topics: alphabetical)."""
        if "tags_text" in self.__dict__:  # fixed when read: parsed once, not once per facet
            return list(self._tags_read.get(facet, ()))
        values = [value for tag_facet, value in self.tag_pairs() if tag_facet == facet]
        return _in_order(facet, values)

    @cached_property
    def _tags_read(self) -> dict[str, list[str]]:
        """The aggregated ``tags_text`` as each facet's values, in order."""
        values: dict[str, list[str]] = defaultdict(list)
        for facet, value in self.tag_pairs():
            values[facet].append(value)
        return {facet: _in_order(facet, found) for facet, found in values.items()}

    def tag_pairs(self) -> list[tuple[str, str]]:
        """(facet, value) of every tag, from ``tags_text``."""
        pairs = (pair.partition("=") for pair in (self.__dict__["tags_text"] or "").split())
        return [(facet, value) for facet, _, value in pairs]

    @property
    def modality(self) -> list[str]:
        return self.tag_values(taxonomy.MODALITY.name)

    @property
    def contribution(self) -> list[str]:
        return self.tag_values(taxonomy.CONTRIBUTION.name)

    @property
    def topics(self) -> list[str]:
        return self.tag_values(TOPIC)


class Work(TagReads, models.Model):
    position = models.PositiveIntegerField(help_text="Position in the curated list (1 = newest).")
    slug = models.SlugField(max_length=200, unique=True)
    title = models.CharField(max_length=500)
    summary = models.TextField()
    month = models.DateField(help_text="First of the month of first publication.")
    month_estimated = models.BooleanField(
        default=False, help_text="The month was estimated from the work's neighbours."
    )
    arxiv_id = models.CharField("arXiv id", max_length=32, blank=True)
    url = models.URLField("URL", max_length=500, blank=True)
    code_url = models.URLField("code URL", max_length=500, blank=True)
    authors = models.JSONField(default=list, blank=True, encoder=ReadableJSONEncoder)
    authors_et_al = models.BooleanField(
        "authors truncated", default=False, help_text="The author list ends in “et al.”"
    )
    venue = models.CharField(max_length=200, blank=True)
    facts_confidence = models.CharField(max_length=8, choices=Confidence, blank=True)
    facts_source = models.CharField(max_length=500, blank=True)
    recurrence_family = models.CharField(
        max_length=32, choices=taxonomy.RECURRENCE_FAMILY.choices, db_index=True
    )
    depth_control = models.CharField(
        max_length=32, choices=taxonomy.DEPTH_CONTROL.choices, db_index=True
    )
    depth_granularity = models.CharField(
        max_length=32, choices=taxonomy.DEPTH_GRANULARITY.choices, db_index=True
    )
    kv_strategy = models.CharField(
        max_length=32, choices=taxonomy.KV_STRATEGY.choices, db_index=True
    )
    training_regime = models.CharField(
        max_length=32, choices=taxonomy.TRAINING_REGIME.choices, db_index=True
    )
    evidence = models.JSONField(
        default=dict,
        blank=True,
        encoder=ReadableJSONEncoder,
        help_text="Basis of facet values: {facet: {note, source[, conflict]}}; a facet "
        "without one rests on the summary.",
    )
    short_names = models.JSONField(
        default=list,
        blank=True,
        encoder=ReadableJSONEncoder,
        help_text="Names other summaries use for the work (Ouro, Huginn…), curated.",
    )
    citation_key = models.CharField(
        max_length=100, unique=True, help_text="Assigned once, so citations stay valid."
    )
    reviewed_at = models.DateTimeField(
        null=True, blank=True, help_text="When a curator last approved a correction."
    )
    search_document = models.GeneratedField(
        expression=SearchDocument(
            "title", "summary", "authors", "venue", "code_url", url_words("code_url")
        ),
        output_field=SearchDocumentField(),
        db_persist=True,
    )

    class Meta:
        ordering = ["-month", "position", "slug"]
        indexes = [
            models.Index(fields=["-month", "position", "slug"]),  # newest; oldest reads it back
            models.Index(fields=["title", "slug"]),  # the "title" sort
            # Explore's counts read only these narrow columns: on PostgreSQL an index-only
            # scan of this index instead of the wide rows (summary, evidence, search text).
            models.Index(
                fields=["recurrence_family", "month"],
                include=[
                    "id",
                    "month_estimated",
                    "depth_control",
                    "depth_granularity",
                    "kv_strategy",
                    "training_regime",
                    "code_url",
                ],
                name="atlas_work_facet_counts",
            ),
        ]

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return work_path(self.slug)

    def tag_pairs(self) -> list[tuple[str, str]]:
        """(facet, value) of every tag: aggregated, else read from its tags."""
        if "tags_text" in self.__dict__:
            return super().tag_pairs()
        return [(tag.facet, tag.value) for tag in self.tags.all()]


class WorkRow(TagReads):
    """A work as ``selectors.work_rows`` reads it, with ``values()``: its columns and its
    aggregated tags as attributes, what the serializer reads, and no model instance
    (building fifty instances cost more than the page's queries)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def work_path(slug: str) -> str:
    """``reverse("atlas:work", kwargs={"slug": slug})``, resolved once: work pages differ
    only in the slug, and a reverse per work cost more than the rest of a long list (the
    map draws thousands)."""
    return f"{get_script_prefix()}{_work_route()}{slug}/"


@functools.cache
def _work_route() -> str:
    """The work page's path below the script prefix, without the slug: ``works/``."""
    path = reverse("atlas:work", kwargs={"slug": "x"})
    return path.removeprefix(get_script_prefix()).removesuffix("x/")


def _in_order(facet: str, values: list[str]) -> list[str]:
    if facet == TOPIC:
        return sorted(values)
    return sorted(values, key=taxonomy.FACETS_BY_NAME[facet].order.__getitem__)


class WorkTag(models.Model):
    """One value of a multi-valued facet (or one free topic) of a work."""

    work = models.ForeignKey(Work, on_delete=models.CASCADE, related_name="tags")
    facet = models.CharField(max_length=32, choices=[(name, name) for name in TAG_FACETS])
    value = models.SlugField(max_length=100)

    class Meta:
        ordering = ["work", "facet", "value"]
        constraints = [
            models.UniqueConstraint(fields=["work", "facet", "value"], name="atlas_tag_unique")
        ]
        indexes = [models.Index(fields=["facet", "value"])]

    def __str__(self) -> str:
        return f"{self.facet}={self.value}"

    def clean(self) -> None:
        """The value must belong to the facet's vocabulary (topics: any slug)."""
        try:
            FIELD_RULES[self.facet].clean([self.value])
        except RecordError as exc:
            raise ValidationError({"value": str(exc)}) from exc


class Author(models.Model):
    """One person, under the name the atlas shows (``atlas.authors`` joins spellings)."""

    key = models.CharField(max_length=200, unique=True, help_text="The folded name.")
    slug = models.SlugField(max_length=200, unique=True)
    name = models.CharField(max_length=200)

    class Meta:
        ordering = ["name", "slug"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("atlas:author", kwargs={"slug": self.slug})


class WorkAuthor(models.Model):
    """An author of a work, at their position in its list, as the work writes the name."""

    work = models.ForeignKey(Work, on_delete=models.CASCADE, related_name="author_links")
    author = models.ForeignKey(Author, on_delete=models.CASCADE, related_name="work_links")
    position = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=200)

    class Meta:
        ordering = ["work", "position"]
        constraints = [
            models.UniqueConstraint(fields=["work", "position"], name="atlas_work_author_unique")
        ]
        indexes = [models.Index(fields=["author", "work"])]

    def __str__(self) -> str:
        return f"{self.work_id}#{self.position}: {self.name}"


class RelatedWork(models.Model):
    """One work related to another, with why; all rows are of one data version
    (``atlas.related`` replaces them together)."""

    class Kind(models.TextChoices):
        MENTIONS = "mentions", "Builds on or discusses"
        MENTIONED_BY = "mentioned_by", "Mentioned by"
        SIMILAR = "similar", "Similar"

    work = models.ForeignKey(Work, on_delete=models.CASCADE, related_name="related_links")
    other = models.ForeignKey(Work, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16, choices=Kind)
    rank = models.PositiveSmallIntegerField()
    reason = models.JSONField(default=dict, encoder=ReadableJSONEncoder)
    version = models.PositiveIntegerField(help_text="The data version it was computed for.")

    class Meta:
        ordering = ["work", "kind", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["work", "kind", "rank"], name="atlas_related_unique")
        ]
        indexes = [
            models.Index(fields=["version"]),
            # The map reads the mentions among works and counts them per work mentioned:
            # a few thousand rows among the similar ones (five per work), read from this.
            models.Index(
                fields=["other", "work"],
                condition=models.Q(kind="mentions"),
                name="atlas_related_mentions",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.work_id} {self.kind} {self.other_id}"


class AtlasChange(models.Model):
    """One reviewed change to the atlas; the newest one is the data version."""

    class Kind(models.TextChoices):
        LOAD = "load", "Curated data file loaded"
        SUGGESTION = "suggestion", "Suggestion approved"
        EDIT = "edit", "Edited by a curator"
        PROPOSAL = "proposal", "Proposed work accepted"

    kind = models.CharField(max_length=16, choices=Kind)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    summary = models.CharField(max_length=500)
    snapshot = models.JSONField(
        default=list,
        blank=True,
        encoder=ReadableJSONEncoder,
        help_text="Every work as exported right after this change (pinned exports).",
    )

    class Meta:
        ordering = ["-at", "-id"]
        get_latest_by = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.summary}"


class FieldChange(models.Model):
    """One field of one work changed by a reviewed change (``field`` "work": added)."""

    change = models.ForeignKey(AtlasChange, on_delete=models.CASCADE, related_name="fields")
    work = models.ForeignKey(Work, on_delete=models.CASCADE, related_name="history")
    field = models.CharField(max_length=32)
    old = models.JSONField(null=True, blank=True, encoder=ReadableJSONEncoder)
    new = models.JSONField(null=True, blank=True, encoder=ReadableJSONEncoder)
    evidence = models.JSONField(
        null=True, blank=True, encoder=ReadableJSONEncoder, help_text="The new value's basis."
    )

    class Meta:
        ordering = ["change_id", "id"]

    def __str__(self) -> str:
        return f"{self.work.slug}: {self.field}"


class Suggestion(models.Model):
    """A visitor's proposed correction of one field of one work, waiting for review."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending review"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"

    work = models.ForeignKey(Work, on_delete=models.CASCADE, related_name="suggestions")
    field = models.CharField(max_length=32)
    proposed_value = models.TextField(help_text="Canonical text form, checked on submission.")
    rationale = models.TextField()
    evidence_note = models.CharField(
        max_length=500, blank=True, help_text="For a facet: why, in the curator's words."
    )
    evidence_source = models.CharField(
        max_length=500, blank=True, help_text="summary, facts, seed NNN or a URL."
    )
    contact = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status, default=Status.PENDING, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    previous_value = models.TextField(blank=True, help_text="The value the approval replaced.")
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    review_note = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.work.slug}: {self.field} → {self.proposed_value[:40]}"

    def get_absolute_url(self) -> str:
        return self.work.get_absolute_url()


class Proposal(models.Model):
    """A visitor's proposal of a new work, reviewed in the open: the intake log lists every
    one with its status and, once reviewed, the curator's public reason.

    The fields are a work's own (checked by the same rules on submission and again on
    acceptance, after any curator's edit); ``contact`` is for curators only and appears in
    no public page, answer, feed or export.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending review"
        ACCEPTED = "accepted", "Accepted"
        REJECTED = "rejected", "Rejected"

    title = models.CharField(max_length=500)
    arxiv_id = models.CharField("arXiv id", max_length=32, blank=True)
    url = models.URLField("URL", max_length=500, blank=True)
    authors = models.JSONField(default=list, blank=True, encoder=ReadableJSONEncoder)
    authors_et_al = models.BooleanField(
        "authors truncated", default=False, help_text="The author list ends in “et al.”"
    )
    month = models.DateField(help_text="First of the month of first publication.")
    month_estimated = models.BooleanField(default=False)
    venue = models.CharField(max_length=200, blank=True)
    code_url = models.URLField("code URL", max_length=500, blank=True)
    facts_source = models.CharField(
        max_length=500,
        blank=True,
        help_text="Where the facts were checked (a URL or a public list's entry); the "
        "accepted work's source of facts names it.",
    )
    summary = models.TextField()
    recurrence_family = models.CharField(max_length=32, choices=taxonomy.RECURRENCE_FAMILY.choices)
    depth_control = models.CharField(max_length=32, choices=taxonomy.DEPTH_CONTROL.choices)
    depth_granularity = models.CharField(max_length=32, choices=taxonomy.DEPTH_GRANULARITY.choices)
    kv_strategy = models.CharField(max_length=32, choices=taxonomy.KV_STRATEGY.choices)
    training_regime = models.CharField(max_length=32, choices=taxonomy.TRAINING_REGIME.choices)
    modality = models.JSONField(default=list, blank=True)
    contribution = models.JSONField(default=list, blank=True)
    topics = models.JSONField(default=list, blank=True)
    evidence = models.JSONField(
        default=dict, blank=True, encoder=ReadableJSONEncoder, help_text="{facet: {note, source}}"
    )
    rationale = models.TextField(help_text="Why it belongs in the atlas.")
    contact = models.CharField(max_length=200, blank=True, help_text="Only curators see it.")
    status = models.CharField(max_length=16, choices=Status, default=Status.PENDING, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    review_note = models.TextField(
        "public reason", blank=True, help_text="Shown in the intake log (required to reject)."
    )
    work = models.OneToOneField(
        Work, on_delete=models.SET_NULL, null=True, blank=True, related_name="proposal"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title}"

    def get_absolute_url(self) -> str:
        return f"{reverse('atlas:intake')}#proposal-{self.pk}"
