"""Reads of the atlas: works, facet counts, timeline, related works, Compare, data version.

Every selector issues a fixed number of queries, whatever the number of works.
"""

import functools
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.db.models import (
    Count,
    OuterRef,
    Q,
    QuerySet,
    StringAgg,
    Subquery,
    TextField,
    Value,
)
from django.db.models.functions import Concat

from atlas import taxonomy
from atlas.authors import name_key
from atlas.filters import HAS_CODE, HAS_CODE_VALUE, WorkFilter
from atlas.models import (
    TOPIC,
    AtlasChange,
    Author,
    FieldChange,
    RelatedWork,
    Work,
    WorkAuthor,
    WorkTag,
    work_path,
)

COMPARE_MAX = 3
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class DataVersion:
    """The newest reviewed change: what every export states and every ETag derives from."""

    change_id: int
    at: datetime

    @property
    def label(self) -> str:
        return self.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def tag(self) -> str:
        return f"{self.change_id}@{self.at.isoformat()}"


def data_version() -> DataVersion:
    latest = AtlasChange.objects.order_by("-at", "-id").values_list("id", "at").first()
    return DataVersion(*latest) if latest else DataVersion(0, _EPOCH)


def work_queryset() -> QuerySet[Work]:
    """Works as pages and the API show them: with their tags (aggregated into one column
    by a subquery, so a page of works is one query and no tag objects), without the
    search column."""
    return _works_with_tags().all()


@functools.cache
def _works_with_tags() -> QuerySet[Work]:
    """Built (and its expressions resolved) once per process, then cloned: building it
    cost as much as the API's page query. Never evaluated itself, so it holds no rows."""
    tags = (
        WorkTag.objects.filter(work=OuterRef("pk"))
        .order_by()
        .values("work")
        .annotate(
            pairs=StringAgg(
                Concat("facet", Value("="), "value", output_field=TextField()), Value(" ")
            )
        )
        .values("pairs")
    )
    return Work.objects.defer("search_document").annotate(tags_text=Subquery(tags))


def work_rows(queryset: QuerySet[Work]) -> QuerySet:
    """``queryset`` (of ``work_queryset()``) read as values: each row a dict of the
    work's columns and its ``tags_text``, for ``WorkRow``."""
    return queryset.values(*_row_fields())


_NOT_IN_ROWS = {"search_document", "short_names", "position"}  # no answer shows them


@functools.cache
def _row_fields() -> list[str]:
    fields = [f.attname for f in Work._meta.concrete_fields if f.name not in _NOT_IN_ROWS]
    return [*fields, "tags_text"]


def work_filter(*, params, queryset: QuerySet[Work] | None = None) -> WorkFilter:
    return WorkFilter(params, queryset=work_queryset() if queryset is None else queryset)


FacetCounts = dict[str, dict[str, int]]


def facet_counts(*, filterset: WorkFilter) -> FacetCounts:
    """Works per facet value under the current filters.

    A single-valued facet (and whether a work has code) is counted ignoring its own
    parameter (its values are alternatives, so each count says what choosing that value
    would add); multi-valued facets and topics are counted within the current results
    (each value narrows).

    Queries: one for all single-valued facets without a filter of their own (grouped by
    all of them at once, summed here), one per single-valued facet being filtered, and
    one for the tags, whatever the number of works.
    """
    counts: FacetCounts = {
        name: {} for name in (*(f.name for f in taxonomy.FACETS), HAS_CODE, TOPIC)
    }
    chosen = filterset.form.cleaned_data
    singles = [*(f.name for f in taxonomy.SINGLE_FACETS), HAS_CODE]
    open_facets = [name for name in singles if not chosen.get(name)]
    if open_facets:
        works = filterset.qs.order_by().annotate(**{HAS_CODE: HAS_CODE_VALUE})
        combinations = works.values_list(*open_facets).annotate(n=Count("pk"))
        for *values, n in combinations:
            for name, value in zip(open_facets, values, strict=True):
                counts[name][value] = counts[name].get(value, 0) + n
    for name in singles:
        if name not in open_facets:
            works = filterset.queryset_without(name).order_by()
            rows = works.annotate(**{HAS_CODE: HAS_CODE_VALUE}).values_list(name)
            counts[name] = dict(rows.annotate(n=Count("pk")))
    tags = WorkTag.objects.all()
    if filterset.narrows:  # else every tag counts, and the index on (facet, value) suffices
        tags = tags.filter(work_id__in=filterset.qs.order_by().values("pk"))
    for facet, value, n in tags.order_by().values_list("facet", "value").annotate(n=Count("pk")):
        counts[facet][value] = n
    return counts


@dataclass(frozen=True)
class TimelineBucket:
    month: date
    recurrence_family: str
    works: int
    estimated: int


def timeline_counts(*, queryset: QuerySet[Work]) -> list[TimelineBucket]:
    """Works per month and recurrence family, oldest month first."""
    rows = (
        queryset.order_by()
        .values_list("month", "recurrence_family")
        .annotate(works=Count("pk"), estimated=Count("pk", filter=Q(month_estimated=True)))
        .order_by("month", "recurrence_family")
    )
    return [TimelineBucket(*row) for row in rows]


# What a work shows as a point of a chart or a link in a list.
POINT_FIELDS = ("slug", "title", "month", "month_estimated", "recurrence_family")


@dataclass(frozen=True)
class TimelinePoint:
    slug: str
    title: str
    month: date
    month_estimated: bool
    recurrence_family: str

    def get_absolute_url(self) -> str:
        return work_path(self.slug)


def timeline_points(*, queryset: QuerySet[Work]) -> list[TimelinePoint]:
    """One point per work, oldest first (callers keep this for bounded result sets)."""
    return [TimelinePoint(*row) for row in _point_rows(queryset)]


def _point_rows(queryset: QuerySet[Work]) -> QuerySet:
    return queryset.order_by("month", "-position", "slug").values_list(*POINT_FIELDS)


@dataclass(frozen=True)
class RelatedLists:
    """A work's stored relations (``atlas.related``), each ``(other work, reason)``."""

    mentions: list[tuple[Work, dict]]
    mentioned_by: list[tuple[Work, dict]]
    similar: list[tuple[Work, dict]]


def work_related(*, work: Work) -> RelatedLists:
    """The relations stored for ``work``: two queries, whatever their number."""
    links = list(
        work.related_links.order_by("kind", "rank").values_list("other_id", "kind", "reason")
    )
    # only what a relation shows: a list can hold thousands (every work naming Ouro)
    others = Work.objects.only(*POINT_FIELDS).in_bulk([other for other, _, _ in links])
    lists: dict[str, list[tuple[Work, dict]]] = {kind: [] for kind in RelatedWork.Kind.values}
    for other, kind, reason in links:
        lists[kind].append((others[other], reason))
    return RelatedLists(**lists)


MAP_MAX_POINTS = 1000


@dataclass(frozen=True)
class AtlasMap:
    points: list[TimelinePoint]  # the works drawn
    edges: list[tuple[str, str]]  # (slug, slug it mentions), both among the filtered works
    mentioned: dict[str, int]  # slug: how many works' summaries mention it (whole atlas)
    total: int  # works in the filter; more than drawn when only mentioned ones fit


def atlas_map(*, queryset: QuerySet[Work]) -> AtlasMap:
    """The mention graph of the filtered works: every work up to ``MAP_MAX_POINTS``, else
    only those that mention or are mentioned. Three queries."""
    mentions = RelatedWork.objects.filter(kind=RelatedWork.Kind.MENTIONS)
    ids = queryset.order_by().values("pk")
    edges = list(  # sorted below: unordered here (the model's order joins the works twice)
        mentions.filter(work__in=ids, other__in=ids)
        .order_by()
        .values_list("work__slug", "other__slug")
    )
    counts = mentions.order_by().values("other__slug").annotate(n=Count("pk"))
    rows = list(_point_rows(queryset))
    total = len(rows)
    if total > MAP_MAX_POINTS:  # points made only for the works drawn
        linked = {slug for edge in edges for slug in edge}
        rows = [row for row in rows if row[0] in linked]
    return AtlasMap(
        points=[TimelinePoint(*row) for row in rows],
        edges=sorted(edges),
        mentioned={row["other__slug"]: row["n"] for row in counts},
        total=total,
    )


def work_authors(*, work: Work) -> list[WorkAuthor]:
    """The work's authors in order, each with their identity (for links to their pages)."""
    return list(work.author_links.select_related("author").order_by("position"))


def author_list(*, search: str = "") -> QuerySet[Author]:
    """Authors with their number of works, most works first; ``search`` matches any part
    of the name, whatever its case, accents or hyphens."""
    authors = Author.objects.annotate(works_count=Count("work_links"))
    for word in name_key(search).split():
        authors = authors.filter(key__contains=word)
    return authors.order_by("-works_count", "name", "slug")


@dataclass(frozen=True)
class Comparison:
    works: list[Work]
    unknown: list[str]
    dropped: list[str]

    @property
    def slugs(self) -> list[str]:
        return [work.slug for work in self.works]

    def differs(self, field: str) -> bool:
        return len({repr(getattr(work, field)) for work in self.works}) > 1


def works_compare(*, slugs: list[str]) -> Comparison:
    """The first ``COMPARE_MAX`` known works in the order given; unknown and surplus
    slugs are named rather than silently dropped."""
    by_slug = {work.slug: work for work in work_queryset().filter(slug__in=slugs)}
    known = [slug for slug in slugs if slug in by_slug]
    return Comparison(
        works=[by_slug[slug] for slug in known[:COMPARE_MAX]],
        unknown=[slug for slug in slugs if slug not in by_slug],
        dropped=known[COMPARE_MAX:],
    )


LAST_SECOND = datetime.max.replace(microsecond=0, tzinfo=UTC)


class UnknownVersion(ValueError):
    """A data version that no reviewed change has (the message says what is accepted)."""


def data_version_find(text: str) -> DataVersion:
    """The version named by its number (``12``) or by the time exports state
    (``2026-12-04T05:00:00Z``; the newest change of that second)."""
    text = text.strip()
    changes = AtlasChange.objects.order_by("-at", "-id")
    if text.isascii() and text.isdigit() and len(text) <= 18:  # isdigit() alone takes "²"
        found = changes.filter(id=int(text)).values_list("id", "at").first()
    else:
        try:
            at = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise UnknownVersion(
                f"{text[:40]!r} is not a data version: give its number or its time "
                "(YYYY-MM-DDTHH:MM:SSZ, as exports state it)"
            ) from None
        that_second = changes.filter(at__gte=at)
        if at < LAST_SECOND:  # the second after the last one there is would overflow
            that_second = that_second.filter(at__lt=at + timedelta(seconds=1))
        found = that_second.values_list("id", "at").first()
    if found is None:
        raise UnknownVersion(f"there is no data version {text[:40]!r}")
    return DataVersion(*found)


def version_rows(version: DataVersion) -> list[dict]:
    """Every work exactly as it was exported at ``version``."""
    return AtlasChange.objects.values_list("snapshot", flat=True).get(id=version.change_id)


def changes_since(*, after: int) -> list[dict]:
    """Each field changed by a reviewed change after data version ``after``, oldest first."""
    rows = (
        FieldChange.objects.filter(change_id__gt=after)
        .order_by("change__at", "change_id", "id")
        .values(
            "change_id",
            "change__at",
            "change__kind",
            "work__slug",
            "field",
            "old",
            "new",
            "evidence",
        )
    )
    return [
        {
            "version": row["change_id"],
            "when": row["change__at"],
            "kind": row["change__kind"],
            "work": row["work__slug"],
            "field": row["field"],
            "old": row["old"],
            "new": row["new"],
            "evidence": row["evidence"],
        }
        for row in rows
    ]
