"""The exit heatmap is a valid Plotly figure: computed cells, grey skipped cells, exit marks."""

import plotly.graph_objects as go
import pytest

from playground.charts import heatmap_figure
from tests.playground.conftest import make_event


def test_an_empty_figure_has_a_row_per_loop_and_no_columns() -> None:
    figure = heatmap_figure(loops=4)
    go.Figure(figure)  # plotly's own schema validation
    cumulative, skipped, exits, legend = figure["data"]
    assert cumulative["y"] == [1, 2, 3, 4] and cumulative["z"] == [[], [], [], []]
    assert (cumulative["zmin"], cumulative["zmax"]) == (0, 1)
    assert skipped["name"] == "not computed" and exits["name"] == "exit loop"
    assert legend["name"] == "not computed (skipped)"
    assert figure["layout"]["yaxis"]["range"] == [0.5, 4.5]
    assert figure["layout"]["shapes"] == []


def test_each_token_is_a_column_its_skipped_loops_grey_and_its_exit_marked() -> None:
    # given two prompt tokens and one generated, exiting at loops 1, 3 and 2 of 3
    events = [
        make_event(0, "prompt", loops=3, exit_loop=1),
        make_event(1, "prompt", loops=3, exit_loop=3),
        make_event(2, "generated", loops=3, exit_loop=2),
    ]
    # when
    figure = heatmap_figure(loops=3, tokens=events)
    # then
    go.Figure(figure)
    cumulative, skipped, exits, _ = figure["data"]
    assert cumulative["x"] == skipped["x"] == exits["x"] == [0, 1, 2]
    assert cumulative["z"] == [[0.3, 0.3, 0.3], [None, 0.6, 0.6], [None, pytest.approx(0.9), None]]
    assert skipped["z"] == [[None, None, None], [1, None, None], [1, None, 1]]
    assert exits["y"] == [1, 3, 2]
    assert "not computed (exited at loop 1)" in skipped["hovertext"][1][0]
    hover = cumulative["hovertext"][1][2]
    assert "loop 2 — exits here" in hover
    assert "λ 0.300 · p 0.300 · cumulative 0.600" in hover and "top: “a” 0.50" in hover
    boundary = figure["layout"]["shapes"]
    assert [(shape["name"], shape["x0"]) for shape in boundary] == [("prompt-boundary", 1.5)]


def test_extrapolated_loops_are_marked_beyond_the_trained_depth() -> None:
    figure = heatmap_figure(loops=6, trained_loops=4)
    go.Figure(figure)
    (line,) = figure["layout"]["shapes"]
    assert line["y0"] == line["y1"] == 4.5
    assert figure["layout"]["annotations"][0]["text"] == "beyond the trained depth"


def test_token_text_in_hover_is_escaped_for_plotly() -> None:
    event = make_event(0, "prompt", loops=2, exit_loop=1) | {"text": "<b>x</b>\n"}
    hover = heatmap_figure(loops=2, tokens=[event])["data"][0]["hovertext"][0][0]
    assert "<b>" not in hover
    assert "“&lt;b&gt;x&lt;/b&gt;\\n”" in hover
