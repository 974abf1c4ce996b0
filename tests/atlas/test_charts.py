"""The timeline figures are valid Plotly figures that say what the chart shows."""

from datetime import date

import plotly.graph_objects as go

from atlas.charts import FAMILY_COLOURS, timeline_bars, timeline_dots
from atlas.selectors import TimelineBucket, TimelinePoint


def _point(slug: str, month: date, family: str, estimated: bool = False) -> TimelinePoint:
    return TimelinePoint(slug, slug.title(), month, estimated, family)


def test_dots_stack_per_month_one_trace_per_family_in_taxonomy_order() -> None:
    # given
    points = [
        _point("a", date(2025, 1, 1), "looped-lm"),
        _point("b", date(2025, 1, 1), "universal", estimated=True),
        _point("c", date(2025, 2, 1), "looped-lm"),
    ]
    # when
    figure = timeline_dots(points)
    # then
    go.Figure(figure)  # plotly's own schema validation
    universal, looped = figure["data"]
    assert universal["name"] == "Universal / weight-tied stack"
    assert (universal["y"], universal["marker"]["symbol"]) == ([1], ["circle-open"])
    assert (looped["y"], looped["marker"]["symbol"]) == ([2, 1], ["circle", "circle"])
    assert looped["customdata"] == ["/works/a/", "/works/c/"]
    assert looped["marker"]["color"] == FAMILY_COLOURS["looped-lm"]
    assert "(estimated)" in universal["hovertext"][0]


def test_bars_count_per_month_and_family_and_link_to_that_slice() -> None:
    buckets = [TimelineBucket(date(2025, 1, 1), "universal", 4, 1)]
    figure = timeline_bars(buckets, lambda month, family: f"?m={month}&f={family}")
    go.Figure(figure)
    (trace,) = figure["data"]
    assert (trace["type"], trace["y"], trace["customdata"]) == (
        "bar",
        [4],
        ["?m=2025-01&f=universal"],
    )
    assert figure["layout"]["barmode"] == "stack"


def test_a_title_cannot_carry_plotly_markup_into_the_hover_text() -> None:
    # given a title with Plotly's pseudo-HTML: a link, formatting, a line break
    title = 'Loops <a href="https://example.org/x">here</a> & <b>bold</b><br>2'
    point = TimelinePoint("m", title, date(2025, 1, 1), False, "looped-lm")
    # when
    (trace,) = timeline_dots([point])["data"]
    # then Plotly gets entities, which it shows as the literal characters
    assert trace["text"] == [
        'Loops &lt;a href="https://example.org/x"&gt;here&lt;/a&gt; &amp; '
        "&lt;b&gt;bold&lt;/b&gt;&lt;br&gt;2"
    ]
    assert "<" not in trace["text"][0]
