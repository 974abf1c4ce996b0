"""A work as data: the one shape the API, the JSON/CSV/BibTeX/RIS exports and Compare share."""

import functools
from collections.abc import Callable
from typing import Any

from django.urls import reverse
from django.utils.functional import cached_property
from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from atlas import taxonomy
from atlas.exports import month_label
from atlas.models import AtlasChange, Confidence, Proposal, Work
from atlas.records import CORRECTABLE_FIELDS, SLUG_RE, RecordError, evidence_source_check


@extend_schema_field({"type": "string", "pattern": r"^\d{4}-\d{2}$", "example": "2026-05"})
class MonthField(serializers.Field):
    def to_representation(self, value):
        return f"{value:%Y-%m}"


class OptionalCharField(serializers.CharField):
    """Stored as ``""`` when absent (Django's convention), given out as ``null``."""

    def __init__(self, **kwargs) -> None:
        super().__init__(allow_null=True, read_only=True, **kwargs)

    def to_representation(self, value):
        return value or None


class OptionalChoiceField(serializers.ChoiceField):
    def __init__(self, **kwargs) -> None:
        super().__init__(allow_null=True, read_only=True, **kwargs)

    def to_representation(self, value):
        return value or None


def _terms(facet: taxonomy.Facet) -> serializers.Field:
    choice = serializers.ChoiceField(choices=facet.slugs)
    if facet.multi:
        return serializers.ListField(child=choice, read_only=True)
    return serializers.ChoiceField(choices=facet.slugs, read_only=True)


class WorkSerializer(serializers.Serializer):
    slug = serializers.SlugField(read_only=True)
    title = serializers.CharField(read_only=True)
    summary = serializers.CharField(read_only=True)
    month = MonthField(read_only=True, help_text="Month of first publication (YYYY-MM).")
    month_estimated = serializers.BooleanField(
        read_only=True, help_text="The month is a lower bound from the seed's order."
    )
    month_label = serializers.SerializerMethodField(
        help_text="The month as people read it: 'Oct 2026' or 'not before Oct 2026'."
    )
    authors = serializers.ListField(child=serializers.CharField(), read_only=True)
    authors_et_al = serializers.BooleanField(
        read_only=True, help_text="The author list is truncated (“et al.”)."
    )
    venue = OptionalCharField()
    arxiv_id = OptionalCharField()
    url = OptionalCharField()
    code_url = OptionalCharField()
    recurrence_family = _terms(taxonomy.RECURRENCE_FAMILY)
    depth_control = _terms(taxonomy.DEPTH_CONTROL)
    depth_granularity = _terms(taxonomy.DEPTH_GRANULARITY)
    kv_strategy = _terms(taxonomy.KV_STRATEGY)
    modality = _terms(taxonomy.MODALITY)
    contribution = _terms(taxonomy.CONTRIBUTION)
    training_regime = _terms(taxonomy.TRAINING_REGIME)
    topics = serializers.ListField(child=serializers.SlugField(), read_only=True)
    citation_key = serializers.CharField(read_only=True)
    evidence = serializers.DictField(
        child=serializers.DictField(child=serializers.CharField()),
        read_only=True,
        help_text="Basis of facet values: {facet: {note, source[, conflict]}}; a facet "
        "without one was classified from the summary.",
    )
    facts_confidence = OptionalChoiceField(choices=Confidence.values)
    facts_source = OptionalCharField()
    reviewed_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="When a curator last approved a correction."
    )
    page_url = serializers.SerializerMethodField(help_text="The work's page on the site.")

    def to_representation(self, instance: Work) -> dict[str, Any]:
        """DRF's answer, field for field, from readers built once per process: DRF's
        per-field machinery (and its copy of every field per serializer) cost more than
        the page's query."""
        return {name: read(instance) for name, read in self._readers}

    @cached_property
    def _readers(self) -> list[tuple[str, Callable[[Any], Any]]]:
        return [
            (name, getattr(self, read) if isinstance(read, str) else read)
            for name, read in _work_readers()
        ]

    def get_month_label(self, work: Work) -> str:
        return month_label(f"{work.month:%Y-%m}", work.month_estimated)

    def get_page_url(self, work: Work) -> str:
        return f"{self._page_url_prefix}{work.slug}/"

    @cached_property
    def _page_url_prefix(self) -> str:
        """Pages differ only in the slug: reverse (and build the absolute URL) once per
        serializer, not once per work."""
        path = reverse("atlas:work", kwargs={"slug": "x"}).removesuffix("x/")
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request else path


class AuthorSerializer(serializers.Serializer):
    slug = serializers.SlugField(read_only=True)
    name = serializers.CharField(read_only=True, help_text="The name the atlas shows.")
    works_count = serializers.IntegerField(read_only=True)
    page_url = serializers.SerializerMethodField(help_text="The author's page on the site.")
    works_url = serializers.SerializerMethodField(help_text="Their works in the API.")

    def get_page_url(self, author) -> str:
        return self._absolute(author.get_absolute_url())

    def get_works_url(self, author) -> str:
        return self._absolute(f"{reverse('api:work-list')}?author={author.slug}")

    def _absolute(self, path: str) -> str:
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request else path


class RelatedItemSerializer(serializers.Serializer):
    slug = serializers.SlugField()
    title = serializers.CharField()
    month = serializers.CharField(help_text="YYYY-MM")
    recurrence_family = serializers.ChoiceField(choices=taxonomy.RECURRENCE_FAMILY.slugs)
    page_url = serializers.CharField()
    name = serializers.CharField(
        required=False, help_text="Mentions: the short name the summary uses."
    )
    score = serializers.FloatField(required=False, help_text="Similar: cosine similarity.")
    facets = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="Similar: shared facet values."
    )
    terms = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="Similar: strongest shared terms."
    )


@extend_schema_serializer(many=False)
class RelatedSerializer(serializers.Serializer):
    mentions = RelatedItemSerializer(many=True, help_text="Works its summary names.")
    mentioned_by = RelatedItemSerializer(many=True, help_text="Works whose summaries name it.")
    similar = RelatedItemSerializer(many=True, help_text="Nearest by text and facets.")


# Fields whose representation of a value is the value itself (a str, a bool or a
# choice's slug, as the database gives them), and lists of them.
_PLAIN = (
    serializers.CharField,
    serializers.SlugField,
    serializers.BooleanField,
    serializers.ChoiceField,
)


@functools.cache
def _work_readers() -> list[tuple[str, str | Callable[[Any], Any]]]:
    """Each field of a work and how to read it: a method name for a method field (bound
    per serializer, which holds the request), else a reader of the work."""
    return [(str(field.field_name), _reader(field)) for field in WorkSerializer()._readable_fields]


def _reader(field: serializers.Field) -> str | Callable[[Any], Any]:
    """``field``'s representation of a work, as ``Serializer.to_representation`` gives it."""
    if isinstance(field, serializers.SerializerMethodField):
        return field.method_name
    if len(field.source_attrs) != 1:
        return lambda work: _general(field, field.get_attribute(work))
    name = field.source_attrs[0]
    if isinstance(field, OptionalCharField | OptionalChoiceField):
        return lambda work: getattr(work, name) or None
    if type(field) in _PLAIN:
        return lambda work: getattr(work, name)
    if isinstance(field, serializers.ListField) and type(field.child) in _PLAIN:
        return lambda work: None if (v := getattr(work, name)) is None else list(v)
    return lambda work: _general(field, getattr(work, name))


def _general(field: serializers.Field, value: Any) -> Any:
    return None if value is None else field.to_representation(value)


class WorkSlugField(serializers.SlugRelatedField):
    """A work by slug; what is not even a slug is refused before it reaches the database
    (PostgreSQL refuses NUL in text with an error, not with no match)."""

    def to_internal_value(self, data: Any) -> Work:
        if not isinstance(data, str) or not SLUG_RE.fullmatch(data):
            self.fail("does_not_exist", slug_name=self.slug_field, value=str(data)[:200])
        return super().to_internal_value(data)


class SuggestionSerializer(serializers.Serializer):
    """A proposed correction; the value is checked against the field's rules on submit."""

    work = WorkSlugField(
        slug_field="slug",
        queryset=Work.objects.all(),
        help_text="Slug of the work to correct.",
        error_messages={"does_not_exist": "no work with slug {value!r}"},
    )
    field = serializers.ChoiceField(choices=list(CORRECTABLE_FIELDS))
    proposed_value = serializers.CharField(
        max_length=5000, help_text="The corrected value; separate several values with ';'."
    )
    rationale = serializers.CharField(max_length=2000, help_text="Why, with a source.")
    evidence_note = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="For a facet: the basis of the proposed label, in a sentence.",
    )
    evidence_source = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="Where the basis comes from: summary, facts, seed NNN or an http(s) URL.",
    )
    contact = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        write_only=True,
        help_text="Optional; only curators see it.",
    )
    id = serializers.IntegerField(read_only=True)
    status = serializers.CharField(read_only=True)

    def validate_evidence_source(self, value: str) -> str:
        if value.strip():
            try:
                evidence_source_check(value.strip())
            except RecordError as exc:
                raise serializers.ValidationError(str(exc)) from exc
        return value

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # DRF's CharField turns a number into text; the schema says string, so refuse it.
        if isinstance(data, dict):
            texts = ("proposed_value", "rationale", "contact", "evidence_note", "evidence_source")
            wrong = [name for name in texts if name in data and not isinstance(data[name], str)]
            if wrong:
                raise serializers.ValidationError({name: ["must be a string"] for name in wrong})
        return super().to_internal_value(data)


# The shapes of the other reads, for the schema: each answers one object, even though it
# is routed as a list.
class FacetValueSerializer(serializers.Serializer):
    slug = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]  # the data's label, not Field.label
    description = serializers.CharField()
    count = serializers.IntegerField()
    selected = serializers.BooleanField(help_text="The current filters include this value.")


class FacetSerializer(serializers.Serializer):
    name = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]  # the data's label, not Field.label
    multi = serializers.BooleanField(help_text="Several values per work (filters: all of).")
    values = FacetValueSerializer(many=True)


@extend_schema_serializer(many=False)
class FacetsSerializer(serializers.Serializer):
    facets = FacetSerializer(many=True)


class TimelineBucketSerializer(serializers.Serializer):
    month = serializers.CharField(help_text="YYYY-MM")
    recurrence_family = serializers.ChoiceField(choices=taxonomy.RECURRENCE_FAMILY.slugs)
    works = serializers.IntegerField()
    estimated = serializers.IntegerField(help_text="Of these, works whose month is estimated.")


@extend_schema_serializer(many=False)
class TimelineSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    buckets = TimelineBucketSerializer(many=True)


@extend_schema_serializer(many=False)
class ComparisonSerializer(serializers.Serializer):
    works = WorkSerializer(many=True)
    differences = serializers.ListField(
        child=serializers.CharField(), help_text="Compared fields whose values differ."
    )


class ChangeSerializer(serializers.Serializer):
    version = serializers.IntegerField(help_text="The data version this change made.")
    when = serializers.DateTimeField()
    kind = serializers.ChoiceField(choices=AtlasChange.Kind.values)
    work = serializers.SlugField()
    field = serializers.CharField(help_text="The field changed; 'work' for a work added.")
    old = serializers.JSONField(allow_null=True)
    new = serializers.JSONField(allow_null=True)
    evidence = serializers.JSONField(allow_null=True, help_text="The new label's basis.")


@extend_schema_serializer(many=False)
class ChangesSerializer(serializers.Serializer):
    since = serializers.IntegerField(help_text="Changes after this data version are listed.")
    data_version = serializers.CharField()
    data_version_number = serializers.IntegerField()
    count = serializers.IntegerField()
    changes = ChangeSerializer(many=True)


@extend_schema_serializer(many=False)
class ExportDocumentSerializer(serializers.Serializer):
    data_version = serializers.CharField(help_text="Date of the last reviewed change.")
    count = serializers.IntegerField()
    works = WorkSerializer(many=True)


class NewWorkSerializer(serializers.Serializer):
    """A proposed work, as the API takes it (the schema's statement of the body; the
    checks are ``atlas.proposals.proposal_check``, the data file's own)."""

    title = serializers.CharField(max_length=500)
    arxiv_id = serializers.CharField(
        max_length=32, required=False, help_text="arXiv id, e.g. 2406.01234 (or give url)."
    )
    url = serializers.URLField(
        max_length=500, required=False, help_text="The paper's http(s) URL (or give arxiv_id)."
    )
    authors = serializers.ListField(
        child=serializers.CharField(max_length=200), max_length=100, required=False
    )
    authors_et_al = serializers.BooleanField(
        required=False, default=False, help_text="The author list is cut short (et al.)."
    )
    month = serializers.RegexField(r"^\d{4}-\d{2}$", help_text="First publication, YYYY-MM.")
    month_estimated = serializers.BooleanField(required=False, default=False)
    venue = serializers.CharField(max_length=200, required=False)
    code_url = serializers.URLField(max_length=500, required=False)
    facts_source = serializers.CharField(
        max_length=400,
        required=False,
        help_text="Where the facts were checked: a URL or a public list's entry "
        "(owner/repo@commit:path#entry).",
    )
    summary = serializers.CharField(max_length=5000, help_text="In your own words.")
    recurrence_family = serializers.ChoiceField(choices=taxonomy.RECURRENCE_FAMILY.slugs)
    depth_control = serializers.ChoiceField(choices=taxonomy.DEPTH_CONTROL.slugs, required=False)
    depth_granularity = serializers.ChoiceField(
        choices=taxonomy.DEPTH_GRANULARITY.slugs, required=False
    )
    kv_strategy = serializers.ChoiceField(choices=taxonomy.KV_STRATEGY.slugs, required=False)
    training_regime = serializers.ChoiceField(
        choices=taxonomy.TRAINING_REGIME.slugs, required=False
    )
    modality = serializers.ListField(
        child=serializers.ChoiceField(choices=taxonomy.MODALITY.slugs), required=False
    )
    contribution = serializers.ListField(
        child=serializers.ChoiceField(choices=taxonomy.CONTRIBUTION.slugs), required=False
    )
    topics = serializers.ListField(child=serializers.SlugField(), max_length=20, required=False)
    evidence = serializers.DictField(
        child=serializers.DictField(child=serializers.CharField()),
        required=False,
        help_text="Basis of facet values: {facet: {note, source}}; source is summary, "
        "facts, seed NNN or an http(s) URL.",
    )
    rationale = serializers.CharField(max_length=2000, help_text="Why it belongs here.")
    contact = serializers.CharField(
        max_length=200, required=False, help_text="Optional; only curators ever see it."
    )


class ProposalSerializer(serializers.Serializer):
    """A proposal as the intake log shows it: everything but the contact."""

    id = serializers.IntegerField(read_only=True)
    status = serializers.ChoiceField(choices=Proposal.Status.values, read_only=True)
    title = serializers.CharField(read_only=True)
    arxiv_id = OptionalCharField()
    url = OptionalCharField()
    authors = serializers.ListField(child=serializers.CharField(), read_only=True)
    authors_et_al = serializers.BooleanField(read_only=True)
    month = MonthField(read_only=True)
    month_estimated = serializers.BooleanField(read_only=True)
    venue = OptionalCharField()
    code_url = OptionalCharField()
    facts_source = OptionalCharField()
    summary = serializers.CharField(read_only=True)
    recurrence_family = _terms(taxonomy.RECURRENCE_FAMILY)
    depth_control = _terms(taxonomy.DEPTH_CONTROL)
    depth_granularity = _terms(taxonomy.DEPTH_GRANULARITY)
    kv_strategy = _terms(taxonomy.KV_STRATEGY)
    modality = _terms(taxonomy.MODALITY)
    contribution = _terms(taxonomy.CONTRIBUTION)
    training_regime = _terms(taxonomy.TRAINING_REGIME)
    topics = serializers.ListField(child=serializers.SlugField(), read_only=True)
    evidence = serializers.DictField(
        child=serializers.DictField(child=serializers.CharField()), read_only=True
    )
    rationale = serializers.CharField(read_only=True)
    submitted_at = serializers.DateTimeField(source="created_at", read_only=True)
    reviewed_at = serializers.DateTimeField(read_only=True, allow_null=True)
    reason = serializers.CharField(
        source="review_note", read_only=True, help_text="The curator's public reason."
    )
    work = serializers.SlugField(
        source="work.slug", read_only=True, allow_null=True, help_text="The work it became."
    )
    work_url = serializers.SerializerMethodField()

    def get_work_url(self, proposal: Proposal) -> str | None:
        if proposal.work is None:
            return None
        request = self.context.get("request")
        path = proposal.work.get_absolute_url()
        return request.build_absolute_uri(path) if request else path


class DuplicateSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["work", "proposal"])
    id = serializers.CharField(help_text="The work's slug or the proposal's number.")
    title = serializers.CharField()
    url = serializers.CharField()
    reason = serializers.CharField()


class ProposalConflictSerializer(serializers.Serializer):
    detail = serializers.CharField()
    duplicate = DuplicateSerializer()
