"""The exit heatmap's Plotly figure: built here, filled and drawn by ``playground-heatmap.js``.

The figure has the same four traces whether it is empty (a new run, before its first
token) or replays a stored run; the page's module appends one column per token event:

0. ``computed``: heatmap, z[loop - 1][column] = the exit loop of the token in that column
   at every loop it computed, null where it did not: the column is the token's shade in
   the text (``playground.palette``), as tall as its work; the cumulative exit
   probability of each cell is in its hover;
1. ``not computed``: heatmap, 1 where the loop was skipped (the token had exited), else
   null; one flat grey that no value of the colour scale takes;
2. ``exit loop``: markers at (position, exit loop);
3. a legend-only square for the grey cells (heatmaps have no legend entry of their own);
4. ``settling loop``: rings at (position, settling loop) where the position computed every
   loop with a lens (``playground.calibration``): the oracle exit beside the rule's; in
   the legend once it has a point.

x is the token position (prompt and generated, split by a labelled dashed line once the
first generated token is known), labelled with the token's text while the run is short
enough to read (``LABELLED_COLUMNS``); y is the loop, 1..T. The figure also carries each
loop's shade (``palette``) for the text. Plain dicts, as in ``atlas.charts``.
"""

import json
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from playground.calibration import token_settling
from playground.palette import loop_colourscale, loop_shades

NOT_COMPUTED = "#d4d4d8"  # a flat grey that no loop's shade is
LABELLED_COLUMNS = 40  # up to this many tokens, the x axis shows their text
EXIT_MARKER = "#e11d48"
SETTLING_MARKER = "#0f172a"
TOP_K_SHOWN = 5


def heatmap_figure(
    *,
    loops: int,
    trained_loops: int | None = None,
    tokens: Iterable[Mapping] = (),
    reasons: Iterable[str] = (),
) -> dict[str, Any]:
    """The figure for a run of ``loops`` loops, with the columns of ``tokens`` (events)
    and each one's difficulty in its exit marker's hover (``reasons``, :mod:`.explain`)."""
    figure: dict[str, Any] = {
        "data": [
            _heatmap_trace(
                "computed (colour: exit loop)",
                loops,
                colorscale=loop_colourscale(loops),
                zmin=0.5,
                zmax=loops + 0.5,
                colorbar={
                    "title": {"text": "exit<br>loop"},
                    "thickness": 12,
                    "tickvals": list(range(1, loops + 1)),
                },
            ),
            _heatmap_trace(
                "not computed",
                loops,
                colorscale=[[0, NOT_COMPUTED], [1, NOT_COMPUTED]],
                showscale=False,
            ),
            {
                "type": "scatter",
                "mode": "markers",
                "name": "exit loop",
                "x": [],
                "y": [],
                "hovertext": [],
                "customdata": [],  # the token's text as its axis label
                "hovertemplate": "%{hovertext}<extra>exit loop</extra>",
                "marker": {
                    "symbol": "diamond",
                    "size": 7,
                    "color": EXIT_MARKER,
                    "line": {"width": 1, "color": "#ffffff"},
                },
            },
            {
                "type": "scatter",
                "mode": "markers",
                "name": "not computed (skipped)",
                "x": [None],
                "y": [None],
                "hoverinfo": "skip",
                "marker": {"symbol": "square", "size": 12, "color": NOT_COMPUTED},
            },
            {
                "type": "scatter",
                "mode": "markers",
                "name": "settling loop (oracle exit)",
                "showlegend": False,
                "x": [],
                "y": [],
                "hovertext": [],
                "hovertemplate": "%{hovertext}<extra>settling loop</extra>",
                "marker": {
                    "symbol": "circle-open",
                    "size": 13,
                    "color": SETTLING_MARKER,
                    "line": {"width": 2},
                },
            },
        ],
        "layout": heatmap_layout(loops=loops, trained_loops=trained_loops),
        "palette": [{"background": s.background, "text": s.text} for s in loop_shades(loops)],
    }
    prompt_tokens, why = 0, iter(reasons)
    for event in tokens:
        reason = next(why, "")
        append_column(figure, event, loops=loops, reason=reason)
        prompt_tokens += event["phase"] == "prompt"
    columns = len(figure["data"][0]["x"])
    if prompt_tokens and prompt_tokens < columns:
        figure["layout"]["shapes"].append(_prompt_boundary(prompt_tokens))
        figure["layout"]["annotations"].append(_boundary_label(prompt_tokens))
    if 0 < columns <= LABELLED_COLUMNS:
        figure["layout"]["xaxis"] |= {
            "tickmode": "array",
            "tickvals": figure["data"][0]["x"],
            "ticktext": figure["data"][2]["customdata"],
        }
    return figure


def _heatmap_trace(name: str, loops: int, **style: Any) -> dict[str, Any]:
    """An empty heatmap trace over loops 1..T; columns are appended as tokens arrive."""
    return {
        "type": "heatmap",
        "name": name,
        "x": [],
        "y": list(range(1, loops + 1)),
        "z": [[] for _ in range(loops)],
        "hovertext": [[] for _ in range(loops)],
        "zmin": 0,
        "zmax": 1,
        **style,
        "xgap": 1,
        "ygap": 1,
        "hoverongaps": False,
        "hovertemplate": "%{hovertext}<extra></extra>",
    }


def heatmap_layout(*, loops: int, trained_loops: int | None = None) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": 140 + 34 * loops,
        "margin": {"l": 48, "r": 16, "t": 24, "b": 48},
        "xaxis": {
            "title": {"text": "token position"},
            "zeroline": False,
            "showgrid": False,
        },
        "yaxis": {
            "title": {"text": "loop"},
            "range": [0.5, loops + 0.5],
            "dtick": 1,
            "zeroline": False,
            "showgrid": False,
        },
        "legend": {"orientation": "h", "y": -0.3 if loops < 6 else -0.15},
        "hovermode": "closest",
        "plot_bgcolor": "#ffffff",
        "shapes": [],
        "annotations": [],
        "uirevision": "heatmap",  # keep the reader's zoom while columns stream in
    }
    if trained_loops and loops > trained_loops:
        layout["shapes"].append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": trained_loops + 0.5,
                "y1": trained_loops + 0.5,
                "line": {"color": "#9a3412", "dash": "dot", "width": 1.5},
            }
        )
        layout["annotations"].append(
            {
                "xref": "paper",
                "x": 1,
                "y": trained_loops + 0.5,
                "xanchor": "right",
                "yanchor": "bottom",
                "text": "beyond the trained depth",
                "showarrow": False,
                "font": {"size": 11, "color": "#9a3412"},
            }
        )
    return layout


def _prompt_boundary(prompt_tokens: int) -> dict[str, Any]:
    return {
        "name": "prompt-boundary",
        "type": "line",
        "yref": "paper",
        "y0": 0,
        "y1": 1,
        "x0": prompt_tokens - 0.5,
        "x1": prompt_tokens - 0.5,
        "line": {"color": "#1b1f24", "dash": "dash", "width": 1},
    }


def _boundary_label(prompt_tokens: int) -> dict[str, Any]:
    return {
        "name": "prompt-boundary",
        "x": prompt_tokens - 0.5,
        "yref": "paper",
        "y": 1,
        "yanchor": "bottom",
        "text": "prompt ◂ ▸ generated",
        "showarrow": False,
        "font": {"size": 11, "color": "#1b1f24"},
    }


def append_column(figure: dict[str, Any], event: Mapping, *, loops: int, reason: str = "") -> None:
    """Add one token's column (the same as the page's module does with a live event)."""
    computed_cells, skipped, exit_marker, _, settling = figure["data"]
    position = event["position"]
    computed = {row["loop"]: row for row in event["loops"]}
    label = f"#{position} {_quoted(event['text'])} ({event['phase']})"
    for trace in (computed_cells, skipped):
        trace["x"].append(position)
    for loop in range(1, loops + 1):
        row = computed.get(loop)
        if row is None:
            computed_cells["z"][loop - 1].append(None)
            computed_cells["hovertext"][loop - 1].append("")
            skipped["z"][loop - 1].append(1)
            skipped["hovertext"][loop - 1].append(
                f"{label}<br>loop {loop}: not computed (exited at loop {event['exit_loop']})"
            )
        else:
            computed_cells["z"][loop - 1].append(event["exit_loop"])
            computed_cells["hovertext"][loop - 1].append(loop_text(label, row, event["exit_loop"]))
            skipped["z"][loop - 1].append(None)
            skipped["hovertext"][loop - 1].append("")
    exit_marker["x"].append(position)
    exit_marker["y"].append(event["exit_loop"])
    exit_marker["customdata"].append(tick_text(event["text"]))
    why = f" ({reason})" if reason else ""
    exit_marker["hovertext"].append(f"{label}: exits at loop {event['exit_loop']}{why}")
    settle = token_settling(event, loops)
    if settle is not None:
        settling["showlegend"] = True
        settling["x"].append(position)
        settling["y"].append(settle)
        settling["hovertext"].append(
            f"{label}: its top-1 settles at loop {settle} (exit at {event['exit_loop']})"
        )


def settling_marks(
    figure: dict[str, Any], marks: Iterable[tuple[int, int]], *, source: str
) -> None:
    """Ring ``(position, settling loop)`` pairs of another run (a full-depth sibling's)
    on this run's heatmap, beside this run's own exits."""
    settling = figure["data"][4]
    for position, loop in marks:
        settling["showlegend"] = True
        settling["x"].append(position)
        settling["y"].append(loop)
        settling["hovertext"].append(f"#{position}: settles at loop {loop} in {source}")


def loop_text(label: str, row: Mapping, exit_loop: int) -> str:
    """One computed cell's hover: λ, p, cumulative and the top-k prediction at that loop."""
    top = ", ".join(f"{_quoted(text)} {p:.2f}" for _, text, p in row["top"][:TOP_K_SHOWN])
    marker = " — exits here" if row["loop"] == exit_loop else ""
    return (
        f"{label}<br>loop {row['loop']}{marker}<br>"
        f"λ {_number(row['gate_lambda'])} · p {_number(row['exit_p'])} · "
        f"cumulative {_number(row['cumulative'])}<br>top: {top or '—'}"
    )


def tick_text(text: str) -> str:
    """A token as an axis label: visible whitespace, escaped, at most 6 characters."""
    shown = text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") or "·"
    return escape(shown[:5] + "…" if len(shown) > 6 else shown, quote=False)


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _quoted(text: str) -> str:
    """A token's text as Plotly shows it safely: escaped (Plotly reads a subset of HTML)."""
    return escape(json.dumps(text, ensure_ascii=False)[1:-1].join("“”"), quote=False)
