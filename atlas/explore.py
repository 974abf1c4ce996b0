"""What the Explore page shows for a query string: results, facet panels, timeline."""

from dataclasses import dataclass, field

from django.core.paginator import Page, Paginator
from django.http import QueryDict

from atlas import charts, taxonomy
from atlas.filters import WorkFilter
from atlas.models import TOPIC
from atlas.selectors import (
    FacetCounts,
    facet_counts,
    timeline_counts,
    timeline_points,
    work_filter,
)

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
    chosen, numbers = _selected(filterset, TOPIC), counts.get(TOPIC, {})
    topics = sorted(numbers.items(), key=lambda item: (-item[1], item[0]))
    topics += [(topic, 0) for topic in sorted(chosen - set(numbers))]
    options = [FacetOption(t, t.replace("-", " "), "", n, t in chosen) for t, n in topics]
    shown = options[:TOPICS_SHOWN] + [o for o in options[TOPICS_SHOWN:] if o.selected]
    more = [o for o in options[TOPICS_SHOWN:] if not o.selected]
    panels.append(FacetPanel(TOPIC, "Topics", True, shown, more))
    return panels


def _bar_link(params: QueryDict):
    def link(month: str, family: str) -> str:
        narrowed = params.copy()
        for name in ("page", "month_from", "month_to", "recurrence_family"):
            narrowed.pop(name, None)
        narrowed.update({"month_from": month, "month_to": month, "recurrence_family": family})
        return "?" + narrowed.urlencode()

    return link


def explore_page(*, params: QueryDict) -> ExplorePage:
    """The page for these parameters; invalid ones give the panels and the errors only."""
    filterset = work_filter(params=params)
    if not filterset.is_valid():
        return ExplorePage(filterset=filterset, panels=facet_panels(filterset, {}))
    works = filterset.qs
    page = Paginator(works, PAGE_SIZE).get_page(params.get("page"))
    if page.paginator.count <= charts.TIMELINE_MAX_POINTS:
        figure = charts.timeline_dots(timeline_points(queryset=works))
    else:
        figure = charts.timeline_bars(timeline_counts(queryset=works), _bar_link(params))
    counts = facet_counts(filterset=filterset)
    return ExplorePage(
        filterset=filterset, panels=facet_panels(filterset, counts), page=page, figure=figure
    )
