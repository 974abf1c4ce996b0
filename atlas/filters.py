"""The one FilterSet behind Explore and the API: same parameters, same meaning, same errors.

Semantics, as a researcher narrowing a list expects them:
- several values of a single-valued facet mean *any of* them (a work has one family);
- several values of a multi-valued facet or of ``topics`` mean *all of* them, so each
  added topic narrows the list;
- several authors mean *any of* them (works by this group);
- different parameters combine with *and*.
An unknown value is refused with a message that names the allowed ones. A parameter
takes at most ``MAX_VALUES`` values (each topic adds a join; a few hundred overflow the
database's expression depth), and a repeated value counts once.
"""

import copy
import re
from datetime import date

import django_filters
from django import forms
from django.db.models import Case, CharField, Exists, OuterRef, QuerySet, Value, When
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from atlas import taxonomy
from atlas.models import TOPIC, Author, Proposal, Work, WorkAuthor, WorkTag
from atlas.records import SLUG_RE, not_allowed
from atlas.search import search_filter

ORDERINGS = {
    "newest": ("-month", "position", "slug"),
    "oldest": ("month", "-position", "-slug"),  # exactly newest reversed (one index serves)
    "title": ("title", "slug"),
}
ORDERING_CHOICES = [("newest", "Newest first"), ("oldest", "Oldest first"), ("title", "Title")]
SEARCH_MAX_LENGTH = 200
MAX_WORKS_PARAM = 50
MAX_VALUES = 20  # values of one list parameter (the largest vocabulary has 11)
_MONTH_OR_YEAR = re.compile(r"^(\d{4})(?:-(\d{2}))?$")


def _not_allowed(param: str, value: str, allowed: list[str]) -> forms.ValidationError:
    return forms.ValidationError(not_allowed(param, value, allowed))


class CopiedShallow:
    """A filter that a FilterSet copies shallowly. django-filter deep-copies every filter
    for each FilterSet, that is for each request, and the deep copy of the choice lists
    cost more than the API's page query; a filter here keeps no state of a request but its
    ``parent``, which the FilterSet sets on its copy."""

    method: object

    def __deepcopy__(self, memo: dict) -> "CopiedShallow":
        copied = copy.copy(self)
        if self.method is not None:
            copied.method = self.method  # a FilterMethod of its own, bound to the copy
        return copied


class VocabularyField(django_filters.fields.MultipleChoiceField):
    """Several values from a vocabulary; an unknown one is refused naming the allowed ones."""

    def __init__(self, *, param: str, **kwargs) -> None:
        self.param = param
        super().__init__(**kwargs)

    def to_python(self, value: object) -> list[str]:
        values = super().to_python(value)
        if len(values) > MAX_VALUES:
            raise forms.ValidationError(f"at most {MAX_VALUES} values, not {len(values)}")
        return list(dict.fromkeys(values))  # a repeated value counts once

    def __deepcopy__(self, memo: dict) -> "VocabularyField":
        # A form copies its fields for each request; the vocabulary is the same for every
        # one, so the copy shares it (ChoiceField's own copy would copy every choice).
        return forms.Field.__deepcopy__(self, memo)

    def validate(self, value: list[str]) -> None:
        if not value:
            return  # no need to read the choices (the topics' come from the database)
        allowed = [str(slug) for slug, _ in self.choices]
        for item in value:
            if item not in allowed:
                raise _not_allowed(self.param, item, allowed)


class OrderingField(django_filters.fields.ChoiceField):
    def validate(self, value: str) -> None:
        allowed = [slug for slug, _ in ORDERING_CHOICES]
        if value and value not in allowed:
            raise _not_allowed("ordering", value, allowed)


class OrderingFilter(CopiedShallow, django_filters.ChoiceFilter):
    field_class = OrderingField


class VocabularyFilter(CopiedShallow, django_filters.MultipleChoiceFilter):
    """Any of the given values of one single-valued facet."""

    field_class = VocabularyField

    def __init__(self, *, field_name: str, **kwargs) -> None:
        super().__init__(field_name=field_name, distinct=False, param=field_name, **kwargs)


class TagFilter(VocabularyFilter):
    """All of the given values of one multi-valued facet (or of topics)."""

    def filter(self, qs: QuerySet, value: list[str]) -> QuerySet:
        for item in value:
            tagged = WorkTag.objects.filter(work=OuterRef("pk"), facet=self.field_name, value=item)
            qs = qs.filter(Exists(tagged))
        return qs


class MonthField(forms.CharField):
    """``YYYY`` or ``YYYY-MM``, as the first or the last month of that span."""

    def __init__(self, *, last: bool = False, **kwargs) -> None:
        self.last = last
        kwargs.setdefault("max_length", 7)
        super().__init__(**kwargs)

    def clean(self, value: str) -> date | None:
        value = super().clean(value)
        if not value:
            return None
        match = _MONTH_OR_YEAR.match(value)
        month = int(match[2] or (12 if self.last else 1)) if match else 0
        if not match or not 1 <= month <= 12 or int(match[1]) < 1:
            raise forms.ValidationError(
                "%(value)r is not a year (YYYY) or a month (YYYY-MM)", params={"value": value}
            )
        return date(int(match[1]), month, 1)


@extend_schema_field({"type": "string", "pattern": r"^(\d{4}(-\d{2})?)?$", "example": "2025-06"})
class MonthFilter(CopiedShallow, django_filters.Filter):
    field_class = MonthField


class SlugListField(forms.CharField):
    """Comma-separated work slugs (as in ``/compare/?works=a,b,c``)."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("max_length", 2000)
        super().__init__(**kwargs)

    def clean(self, value: str) -> list[str]:
        slugs = [part.strip() for part in (super().clean(value) or "").split(",")]
        slugs = list(dict.fromkeys(slug for slug in slugs if slug))
        malformed = [slug for slug in slugs if not SLUG_RE.match(slug)]
        if malformed:
            raise forms.ValidationError(
                "not work slugs: %(slugs)s", params={"slugs": ", ".join(malformed)}
            )
        if len(slugs) > MAX_WORKS_PARAM:
            raise forms.ValidationError(f"at most {MAX_WORKS_PARAM} works at a time")
        return slugs


@extend_schema_field(OpenApiTypes.STR)
class SlugListFilter(CopiedShallow, django_filters.Filter):
    field_class = SlugListField

    def filter(self, qs: QuerySet, value: list[str]) -> QuerySet:
        return qs.filter(slug__in=value) if value else qs


@extend_schema_field({"type": "string", "pattern": SLUG_RE.pattern})
class TopicFilter(TagFilter):
    """All of the given topics (free slugs; the ones in use are the allowed values)."""


class AuthorField(VocabularyField):
    """Author slugs; one that names no author is refused by name (the allowed values are
    too many to list: ``/api/v1/authors/?search=`` finds them)."""

    def validate(self, value: list[str]) -> None:
        if not value:
            return
        malformed = [slug for slug in value if not SLUG_RE.match(slug)]
        known = set(
            Author.objects.filter(slug__in=[s for s in value if s not in malformed]).values_list(
                "slug", flat=True
            )
        )
        unknown = [slug for slug in value if slug not in known]
        if unknown:
            raise forms.ValidationError(
                "no author with slug %(slugs)s; /api/v1/authors/?search= finds them",
                params={"slugs": ", ".join(map(repr, unknown))},
            )


@extend_schema_field({"type": "string", "pattern": SLUG_RE.pattern})
class AuthorFilter(CopiedShallow, django_filters.MultipleChoiceFilter):
    """Works by any of these authors."""

    field_class = AuthorField

    def __init__(self, **kwargs) -> None:
        super().__init__(field_name="author", choices=[], param="author", **kwargs)

    def filter(self, qs: QuerySet, value: list[str]) -> QuerySet:
        if not value:
            return qs
        links = WorkAuthor.objects.filter(work=OuterRef("pk"), author__slug__in=value)
        return qs.filter(Exists(links))


HAS_CODE = "has_code"
HAS_CODE_CHOICES = [("true", "Code released"), ("false", "No code link")]
# Whether a work links its code, as a value grouped and counted like a stored facet's.
HAS_CODE_VALUE = Case(
    When(code_url="", then=Value("false")), default=Value("true"), output_field=CharField()
)


class HasCodeFilter(VocabularyFilter):
    """``true``: works with a code link; ``false``: without; both: every work."""

    def __init__(self, **kwargs) -> None:
        super().__init__(field_name=HAS_CODE, choices=HAS_CODE_CHOICES, **kwargs)

    def filter(self, qs: QuerySet, value: list[str]) -> QuerySet:
        if len(value) != 1:
            return qs
        return qs.exclude(code_url="") if value == ["true"] else qs.filter(code_url="")


def _topics_in_use() -> list[tuple[str, str]]:
    """Topic choices, read only when a topic must be validated (the form is lazy)."""
    topics = WorkTag.objects.filter(facet=TOPIC).values_list("value", flat=True)
    return [(topic, topic) for topic in topics.distinct().order_by("value")]


class SearchFilter(CopiedShallow, django_filters.CharFilter):
    """Words to find (``WorkFilter.filter_search``)."""


class WorkFilterForm(forms.Form):
    def clean_works(self) -> list[str]:
        slugs = self.cleaned_data["works"]
        if not slugs:
            return slugs
        known = set(Work.objects.filter(slug__in=slugs).values_list("slug", flat=True))
        unknown = [slug for slug in slugs if slug not in known]
        if unknown:
            raise forms.ValidationError(
                "no work with slug %(slugs)s", params={"slugs": ", ".join(unknown)}
            )
        return slugs


def _facet_filter(facet: taxonomy.Facet) -> VocabularyFilter:
    cls, scope = (TagFilter, "All") if facet.multi else (VocabularyFilter, "Any")
    return cls(
        field_name=facet.name,
        choices=facet.choices,
        label=facet.label,
        help_text=f"{scope} of these values.",
    )


class WorkFilter(django_filters.FilterSet):
    search = SearchFilter(
        method="filter_search",
        max_length=SEARCH_MAX_LENGTH,
        label="Search",
        help_text="Words to find in the title, summary or authors.",
    )
    month_from = MonthFilter(
        field_name="month", lookup_expr="gte", label="From", help_text="YYYY or YYYY-MM."
    )
    month_to = MonthFilter(
        field_name="month", lookup_expr="lte", last=True, label="To", help_text="YYYY or YYYY-MM."
    )
    recurrence_family = _facet_filter(taxonomy.RECURRENCE_FAMILY)
    depth_control = _facet_filter(taxonomy.DEPTH_CONTROL)
    depth_granularity = _facet_filter(taxonomy.DEPTH_GRANULARITY)
    kv_strategy = _facet_filter(taxonomy.KV_STRATEGY)
    modality = _facet_filter(taxonomy.MODALITY)
    contribution = _facet_filter(taxonomy.CONTRIBUTION)
    training_regime = _facet_filter(taxonomy.TRAINING_REGIME)
    topics = TopicFilter(
        field_name=TOPIC, choices=_topics_in_use, label="Topics", help_text="All of these topics."
    )
    has_code = HasCodeFilter(label="Code", help_text="true (a code link) or false (none).")
    author = AuthorFilter(label="Authors", help_text="Any of these authors (slugs).")
    works = SlugListFilter(label="Works", help_text="Comma-separated work slugs.")
    ordering = OrderingFilter(
        choices=ORDERING_CHOICES,
        method="filter_ordering",
        empty_label=None,
        label="Sort",
        help_text="newest (default), oldest or title.",
    )

    class Meta:
        model = Work
        fields: list[str] = []
        form = WorkFilterForm

    def get_form_class(self) -> type[forms.Form]:
        # The form class depends on the declared filters only: build it once, not per request.
        cls = type(self)
        if "_form_class" not in cls.__dict__:
            cls._form_class = super().get_form_class()
        return cls._form_class

    def filter_search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return search_filter(queryset, value)  # never blank: the field strips, "" is skipped

    def filter_ordering(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.order_by(*ORDERINGS[value])

    @property
    def narrows(self) -> bool:
        """Whether any parameter other than the sort leaves works out."""
        return any(value for name, value in self.form.cleaned_data.items() if name != "ordering")

    def queryset_without(self, name: str) -> QuerySet:
        """The filtered works, ignoring one parameter (for disjunctive facet counts)."""
        queryset = self.queryset.all()
        for other, value in self.form.cleaned_data.items():
            if other != name:
                queryset = self.filters[other].filter(queryset, value)
        return queryset


class ProposalFilter(django_filters.FilterSet):
    """The intake log's one filter, for its page and the API alike."""

    status = django_filters.ChoiceFilter(
        choices=Proposal.Status.choices, help_text="pending, accepted or rejected."
    )

    class Meta:
        model = Proposal
        fields: list[str] = []
