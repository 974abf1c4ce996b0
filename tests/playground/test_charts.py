"""The exit heatmap is a valid Plotly figure: computed cells, grey skipped cells, exit marks."""

import plotly.graph_objects as go
import pytest

from playground.charts import LABELLED_COLUMNS, NOT_COMPUTED, heatmap_figure
from playground.palette import loop_shades
from tests.playground.conftest import make_event


def test_an_empty_figure_has_a_row_per_loop_and_no_columns() -> None:
    figure = heatmap_figure(loops=4)
    go.Figure(figure)  # plotly's own schema validation
    computed, skipped, exits, legend, settling = figure["data"]
    assert computed["y"] == [1, 2, 3, 4] and computed["z"] == [[], [], [], []]
    assert (computed["zmin"], computed["zmax"]) == (0.5, 4.5)  # one colour band per loop
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
    computed, skipped, exits, _, _ = figure["data"]
    assert computed["x"] == skipped["x"] == exits["x"] == [0, 1, 2]
    assert computed["z"] == [[1, 3, 2], [None, 3, 2], [None, 3, None]]  # coloured by exit loop
    assert skipped["z"] == [[None, None, None], [1, None, None], [1, None, 1]]
    assert exits["y"] == [1, 3, 2]
    assert "not computed (exited at loop 1)" in skipped["hovertext"][1][0]
    hover = computed["hovertext"][1][2]
    assert "loop 2 — exits here" in hover
    assert "λ 0.300 · p 0.300 · cumulative 0.600" in hover and "top: “a” 0.50" in hover
    boundary = figure["layout"]["shapes"]
    assert [(shape["name"], shape["x0"]) for shape in boundary] == [("prompt-boundary", 1.5)]
    (label,) = figure["layout"]["annotations"]
    assert (label["x"], label["text"]) == (1.5, "prompt ◂ ▸ generated")


def test_the_heatmap_and_the_text_share_one_shade_per_loop() -> None:
    # given a 4-loop figure
    figure = heatmap_figure(loops=4)
    scale = figure["data"][0]["colorscale"]
    # then loop t's band of the colour scale is the text's shade for loop t
    for loop, shade in enumerate(loop_shades(4), start=1):
        assert figure["palette"][loop - 1] == {"background": shade.background, "text": shade.text}
        band = scale[2 * loop - 2 : 2 * loop]  # [start, end] of loop t's flat band
        assert band == [[(loop - 1) / 4, shade.background], [loop / 4, shade.background]]
    # and loop 1 is the palest, the last the darkest
    assert [s.background for s in loop_shades(4)][::3] == ["#fef3c7", "#1e3a8a"]


@pytest.mark.parametrize("loops", [1, 2, 3, 4, 6, 8, 12, 16, 32])
def test_every_shade_reads_at_aa_contrast(loops) -> None:
    for shade in loop_shades(loops):
        assert _contrast(shade.background, shade.text) >= 4.5, (loops, shade)


@pytest.mark.parametrize("loops", [2, 4, 6, 12])
def test_no_shade_looks_like_a_skipped_cell(loops) -> None:
    grey = [int(NOT_COMPUTED[i : i + 2], 16) for i in (1, 3, 5)]
    for shade in loop_shades(loops):
        rgb = [int(shade.background[i : i + 2], 16) for i in (1, 3, 5)]
        assert max(rgb) - min(rgb) > 40, shade  # a hue, not a grey
        assert sum(abs(a - b) for a, b in zip(rgb, grey, strict=True)) > 40, shade


def _contrast(a: str, b: str) -> float:
    def luminance(colour: str) -> float:
        rgb = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_a_short_run_labels_its_axis_with_token_text_and_a_long_one_does_not() -> None:
    short = [make_event(i, "prompt") | {"text": t} for i, t in enumerate(["de", "f ", "<x>"])]
    axis = heatmap_figure(loops=4, tokens=short)["layout"]["xaxis"]
    assert (axis["tickvals"], axis["ticktext"]) == ([0, 1, 2], ["de", "f␣", "&lt;x&gt;"])
    long = [make_event(i, "prompt") for i in range(LABELLED_COLUMNS + 1)]
    assert "tickvals" not in heatmap_figure(loops=4, tokens=long)["layout"]["xaxis"]


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


def test_full_depth_columns_ring_their_settling_loop_beside_the_exit() -> None:
    # given a full-depth position (settles at 2, exits at 3) and one that skipped a loop
    full = make_event(0, "generated", loops=3, exit_loop=3) | {"settling_loop": 2}
    skipped = make_event(1, "generated", loops=3, exit_loop=1) | {"settling_loop": None}

    # when
    figure = heatmap_figure(loops=3, tokens=[full, skipped])

    # then
    go.Figure(figure)
    exits, settling = figure["data"][2], figure["data"][4]
    assert exits["y"] == [3, 1]
    assert (settling["x"], settling["y"]) == ([0], [2]) and settling["showlegend"]
    assert "settles at loop 2 (exit at 3)" in settling["hovertext"][0]


def test_a_run_that_skips_loops_shows_no_settling_ring() -> None:
    figure = heatmap_figure(loops=3, tokens=[make_event(0, loops=3, exit_loop=2)])
    assert figure["data"][4]["x"] == [] and not figure["data"][4]["showlegend"]
