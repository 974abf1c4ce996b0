"""What the Explore page shows for a query string (results, facet panels, timeline), and
what an author's page shows (their works and the same panels over them)."""

import hashlib
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import cache
from django.core.paginator import Page, Paginator
from django.http import QueryDict

from atlas import charts, taxonomy
from atlas.filters import HAS_CODE, HAS_CODE_CHOICES, WorkFilter
from atlas.models import TOPIC, Author, Work
from atlas.selectors import (
    FacetCounts,
    data_version,
    facet_counts,
    timeline_counts,
    timeline_points,
    work_filter,
)
from loopatlas.querystring import query_normalised

PAGE_SIZE = 25
TOPICS_SHOWN = 15


@dataclass(frozen=True)
class FacetOption:
    slug: str
    label: str
    description: str
    count: int
    selected: bool


@dataclass(frozen=True)
class FacetPanel:
    name: str
    label: str
    multi: bool
    options: list[FacetOption]
    more: list[FacetOption] = field(default_factory=list)


@dataclass(frozen=True)
class ExplorePage:
    filterset: WorkFilter
    panels: list[FacetPanel]
    page: Page | None = None
    figure: dict | None = None
    cache_key: str = ""  # the data version and the search: what the fragments depend on
    cache_seconds: int = 0
    version: str = ""  # the data version alone: what a result row depends on
    authors: list[Author] = field(default_factory=list)  # the ``author`` filter's, by name

    @property
    def total(self) -> int:
        return self.page.paginator.count if self.page else 0


def _selected(filterset: WorkFilter, name: str) -> set[str]:
    return set(filterset.data.getlist(name))


def facet_panels(filterset: WorkFilter, counts: FacetCounts) -> list[FacetPanel]:
    panels = []
    for facet in taxonomy.FACETS:
        chosen, numbers = _selected(filterset, facet.name), counts.get(facet.name, {})
        options = [
            FacetOption(t.slug, t.label, t.description, numbers.get(t.slug, 0), t.slug in chosen)
            for t in facet.terms
        ]
        panels.append(FacetPanel(facet.name, facet.label, facet.multi, options))
    chosen, numbers = _selected(filterset, HAS_CODE), counts.get(HAS_CODE, {})
    options = [
        FacetOption(slug, label, "", numbers.get(slug, 0), slug in chosen)
        for slug, label in HAS_CODE_CHOICES
    ]
    panels.append(FacetPanel(HAS_CODE, "Code", False, options))
    chosen, numbers = _selected(filterset, TOPIC), counts.get(TOPIC, {})
    topics = sorted(numbers.items(), key=lambda item: (-item[1], item[0]))
    topics += [(topic, 0) for topic in sorted(chosen - set(numbers))]
    options = [FacetOption(t, t.replace("-", " "), "", n, t in chosen) for t, n in topics]
    shown = options[:TOPICS_SHOWN] + [o for o in options[TOPICS_SHOWN:] if o.selected]
    more = [o for o in options[TOPICS_SHOWN:] if not o.selected]
    panels.append(FacetPanel(TOPIC, "Topics", True, shown, more))
    return panels


def _bar_link(params: QueryDict):
    """Links to Explore narrowed to one month and family, keeping the other filters."""
    kept = params.copy()
    for name in ("page", "month_from", "month_to", "recurrence_family"):
        kept.pop(name, None)
    prefix = f"?{kept.urlencode()}&" if kept else "?"

    def link(month: str, family: str) -> str:
        return f"{prefix}month_from={month}&month_to={month}&recurrence_family={family}"

    return link


class CountedPaginator(Paginator):
    """A paginator told the total it would otherwise count with a query of its own."""

    def __init__(self, object_list, per_page: int, *, count: int) -> None:
        super().__init__(object_list, per_page)
        self._known_count = count

    @property
    def count(self) -> int:
        return self._known_count


@dataclass(frozen=True)
class ExploreSummary:
    """What a search's aggregates give the page: one version's answer for its filters."""

    total: int
    counts: FacetCounts
    figure: dict


def explore_page(*, params: QueryDict) -> ExplorePage:
    """The page for these parameters; invalid ones give the panels and the errors only.

    The aggregates (counts per facet value, the timeline, the total) cost the most at
    scale and depend only on the data version and the filters, so they are cached under
    both (``cache_key``, which the template's fragments of them use too): nothing cached
    can go stale. The page of results is read each time; each result row's text, which
    depends on the work and the version alone, is a fragment cached under them.
    """
    filterset = work_filter(params=params)
    if not filterset.is_valid():
        return ExplorePage(filterset=filterset, panels=facet_panels(filterset, {}))
    kept = params.copy()
    kept.pop("page", None)  # every page of a search shares its aggregates
    search = hashlib.sha256(query_normalised(kept).encode()).hexdigest()  # bounded, any query
    version = data_version().tag
    key = f"{version}:{search}"
    summary: ExploreSummary | None = cache.get(f"explore:{key}")
    if summary is None:
        summary = _summary(filterset, params)
        cache.set(f"explore:{key}", summary, settings.EXPLORE_CACHE_SECONDS)
    page = CountedPaginator(filterset.qs, PAGE_SIZE, count=summary.total)
    return ExplorePage(
        filterset=filterset,
        panels=facet_panels(filterset, summary.counts),
        page=page.get_page(params.get("page")),
        figure=summary.figure,
        cache_key=key,
        cache_seconds=settings.EXPLORE_CACHE_SECONDS,
        version=version,
        authors=list(Author.objects.filter(slug__in=filterset.form.cleaned_data["author"])),
    )


def _summary(filterset: WorkFilter, params: QueryDict) -> ExploreSummary:
    """The timeline's counts per month and family also give the total, so the results
    need no separate count."""
    works = filterset.qs
    buckets = timeline_counts(queryset=works)
    total = sum(bucket.works for bucket in buckets)
    if total <= charts.TIMELINE_MAX_POINTS:
        figure = charts.timeline_dots(timeline_points(queryset=works))
    else:
        figure = charts.timeline_bars(buckets, _bar_link(params))
    return ExploreSummary(total, facet_counts(filterset=filterset), figure)


TRUNCATED_SHOWN = 50


@dataclass(frozen=True)
class AuthorPage:
    author: Author
    page: Page  # of their works, newest first
    panels: list[FacetPanel]
    truncated: list[Work]  # up to TRUNCATED_SHOWN works with "et al." lists, not theirs
    truncated_total: int

    @property
    def total(self) -> int:
        return self.page.paginator.count


def author_page(*, author: Author, page: str | None = None) -> AuthorPage:
    """A page of the author's works newest first, the facet counts of all of them, and
    the works whose truncated author lists may hide more works by them."""
    filterset = work_filter(params=QueryDict(f"author={author.slug}"))
    filterset.is_valid()
    works = Paginator(filterset.qs, PAGE_SIZE).get_page(page)
    panels = facet_panels(filterset, facet_counts(filterset=filterset))
    truncated = (
        work_filter(params=QueryDict())
        .qs.filter(authors_et_al=True)
        .exclude(pk__in=filterset.qs.order_by().values("pk"))
    )
    return AuthorPage(
        author=author,
        page=works,
        panels=panels,
        truncated=list(truncated[:TRUNCATED_SHOWN]),
        truncated_total=truncated.count(),
    )
