"""The atlas's data: works, their multi-valued facets, suggestions and data versions.

Single-valued facets are plain indexed columns. Multi-valued facets (and free topics)
are rows of ``WorkTag`` so that filtering and counting are ordinary joins and
``GROUP BY`` on every database, with no JSON operators that SQLite lacks.
"""

import json

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.urls import reverse

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


class Work(models.Model):
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
        ]

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("atlas:work", kwargs={"slug": self.slug})

    def tag_values(self, facet: str) -> list[str]:
        """One multi-valued facet's values, in vocabulary order (topics: alphabetical)."""
        values = [value for tag_facet, value in self.tag_pairs() if tag_facet == facet]
        if facet == TOPIC:
            return sorted(values)
        order = taxonomy.FACETS_BY_NAME[facet].slugs
        return sorted(values, key=order.index)

    def tag_pairs(self) -> list[tuple[str, str]]:
        """(facet, value) of every tag; works from ``selectors.work_queryset()`` carry them
        aggregated as ``tags_text`` ("facet=value ..."), others read their tags."""
        if "tags_text" in self.__dict__:
            pairs = (pair.partition("=") for pair in (self.__dict__["tags_text"] or "").split())
            return [(facet, value) for facet, _, value in pairs]
        return [(tag.facet, tag.value) for tag in self.tags.all()]

    @property
    def modality(self) -> list[str]:
        return self.tag_values(taxonomy.MODALITY.name)

    @property
    def contribution(self) -> list[str]:
        return self.tag_values(taxonomy.CONTRIBUTION.name)

    @property
    def topics(self) -> list[str]:
        return self.tag_values(TOPIC)


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
        indexes = [models.Index(fields=["version"])]

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
