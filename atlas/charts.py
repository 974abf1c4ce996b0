"""Plotly figure dicts for the Explore timeline (drawn client-side by ``timeline.js``) and
the map of mentions (``map.js``).

Plain dicts rather than ``plotly.graph_objects``: the figure is built on every Explore
request, and the graph objects' validation costs more than the page's queries (the
tests validate the dicts with plotly instead).

Up to ``TIMELINE_MAX_POINTS`` works the timeline shows one dot per work, stacked per
month, so hovering shows its title and a click opens it; estimated months are hollow.
Beyond that, it shows stacked bars of counts per month and family, and a click narrows
Explore to that month and family.
"""

from collections import defaultdict
from collections.abc import Callable
from html import escape
from typing import Any

from atlas import taxonomy
from atlas.models import work_path
from atlas.selectors import AtlasMap, TimelineBucket, TimelinePoint

TIMELINE_MAX_POINTS = 1000
PLOT_HEIGHT_PX = 240  # of the 320 px figure, what the stacked dots may fill
# Tableau 10 plus one, in taxonomy order: distinct hues for the eleven families.
FAMILY_COLOURS = dict(
    zip(
        taxonomy.RECURRENCE_FAMILY.slugs,
        (
            "#4e79a7",
            "#f28e2b",
            "#e15759",
            "#76b7b2",
            "#59a14f",
            "#edc948",
            "#b07aa1",
            "#ff9da7",
            "#9c755f",
            "#bab0ac",
            "#393b79",
        ),
        strict=True,
    )
)


def _layout(*, barmode: str | None = None, tallest: int = 0) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": 320,
        "margin": {"l": 48, "r": 16, "t": 8, "b": 40},
        "xaxis": {"type": "date"},
        "yaxis": {"title": {"text": "Works"}, "rangemode": "tozero", "tickformat": "d"},
        "legend": {"orientation": "h", "y": -0.25},
        "hovermode": "closest",
        "plot_bgcolor": "#ffffff",
    }
    if barmode:
        layout["barmode"] = barmode
    if tallest:  # whole works only: one tick per work up to ten, then fewer
        layout["yaxis"] |= {"dtick": max(1, -(-tallest // 10)), "range": [0, tallest + 0.5]}
    return layout


def timeline_dots(points: list[TimelinePoint]) -> dict:
    """One dot per work; y is its place in the month's stack."""
    traces: dict[str, dict] = {}
    height: dict = defaultdict(int)
    for point in sorted(points, key=lambda p: (p.month, _family_rank(p.recurrence_family))):
        height[point.month] += 1
        trace = traces.setdefault(point.recurrence_family, _dot_trace(point.recurrence_family))
        trace["x"].append(f"{point.month:%Y-%m-%d}")
        trace["y"].append(height[point.month])
        trace["text"].append(escape(point.title, quote=False))  # Plotly reads HTML in text
        trace["hovertext"].append(
            f"{point.month:%b %Y}" + (" (estimated)" if point.month_estimated else "")
        )
        trace["customdata"].append(work_path(point.slug))
        trace["marker"]["symbol"].append("circle-open" if point.month_estimated else "circle")
    ordered = sorted(traces.items(), key=lambda item: _family_rank(item[0]))
    tallest = max(height.values(), default=0)
    size = max(4, min(10, PLOT_HEIGHT_PX // max(tallest, 1)))  # a full month's stack fits
    for _, trace in ordered:
        trace["marker"]["size"] = size
    return {"data": [trace for _, trace in ordered], "layout": _layout(tallest=tallest)}


def _dot_trace(family: str) -> dict:
    colour = FAMILY_COLOURS[family]
    return {
        "type": "scatter",
        "mode": "markers",
        "name": taxonomy.RECURRENCE_FAMILY.label_of(family),
        "x": [],
        "y": [],
        "text": [],
        "hovertext": [],
        "customdata": [],
        "hovertemplate": "%{text}<br>%{hovertext}<extra>%{fullData.name}</extra>",
        "marker": {"color": colour, "symbol": [], "line": {"width": 1.5, "color": colour}},
    }


def timeline_bars(buckets: list[TimelineBucket], link: Callable[[str, str], str]) -> dict:
    """Stacked counts per month and family; ``link(month, family)`` is where a click goes."""
    traces: dict[str, dict] = {}
    for bucket in buckets:
        family = bucket.recurrence_family
        trace = traces.setdefault(family, _bar_trace(family))
        month = f"{bucket.month:%Y-%m}"
        trace["x"].append(f"{bucket.month:%Y-%m-%d}")
        trace["y"].append(bucket.works)
        trace["customdata"].append(link(month, family))
    ordered = sorted(traces.items(), key=lambda item: _family_rank(item[0]))
    return {"data": [trace for _, trace in ordered], "layout": _layout(barmode="stack")}


def _bar_trace(family: str) -> dict:
    return {
        "type": "bar",
        "name": taxonomy.RECURRENCE_FAMILY.label_of(family),
        "x": [],
        "y": [],
        "customdata": [],
        "hovertemplate": "%{x|%b %Y}: %{y} works<extra>%{fullData.name}</extra>",
        "marker": {"color": FAMILY_COLOURS[family]},
    }


def _family_rank(family: str) -> int:
    return taxonomy.RECURRENCE_FAMILY.slugs.index(family)


LANE_SPREAD = 0.6  # of the unit between two family lanes, what a month's works spread over


def mention_map(atlas_map: AtlasMap) -> dict:
    """Works as dots at their month (x) in their family's lane (y), sized by how often
    other summaries mention them, with a line from each work to each work it mentions."""
    place: dict[str, tuple[str, float]] = {}
    in_month: dict = defaultdict(int)
    traces: dict[str, dict] = {}
    stacked = sorted(atlas_map.points, key=lambda p: (p.month, p.slug))
    for point in stacked:
        lane = _family_rank(point.recurrence_family)
        k = in_month[(point.month, lane)]
        in_month[(point.month, lane)] += 1
        y = lane + (k % 7) / 6 * LANE_SPREAD - LANE_SPREAD / 2
        place[point.slug] = (f"{point.month:%Y-%m-%d}", round(y, 3))
        mentioned = atlas_map.mentioned.get(point.slug, 0)
        trace = traces.setdefault(point.recurrence_family, _node_trace(point.recurrence_family))
        trace["x"].append(place[point.slug][0])
        trace["y"].append(place[point.slug][1])
        trace["text"].append(escape(point.title, quote=False))
        trace["hovertext"].append(f"{point.month:%b %Y} · mentioned by {mentioned}")
        trace["customdata"].append(work_path(point.slug))
        trace["marker"]["size"].append(min(40, 7 + 3 * mentioned))
    edges: dict[str, Any] = {
        "type": "scatter",
        "mode": "lines",
        "name": "mentions",
        "x": [],
        "y": [],
        "hoverinfo": "skip",
        "line": {"width": 0.7, "color": "rgba(87, 96, 106, 0.45)"},
    }
    for source, target in atlas_map.edges:
        if source in place and target in place:
            edges["x"] += [place[source][0], place[target][0], None]
            edges["y"] += [place[source][1], place[target][1], None]
    ordered = [trace for _, trace in sorted(traces.items(), key=lambda i: _family_rank(i[0]))]
    families = taxonomy.RECURRENCE_FAMILY
    layout = _layout() | {
        "height": 560,
        "margin": {"l": 170, "r": 16, "t": 8, "b": 40},
        "yaxis": {
            "tickvals": list(range(len(families.slugs))),
            "ticktext": [families.label_of(slug) for slug in families.slugs],
            "range": [-0.6, len(families.slugs) - 0.4],
            "zeroline": False,
        },
        "showlegend": False,
    }
    return {"data": [edges, *ordered], "layout": layout}


def _node_trace(family: str) -> dict:
    trace = _dot_trace(family)
    trace["marker"] = {"color": FAMILY_COLOURS[family], "size": [], "opacity": 0.85}
    return trace
