"""The exit heatmap's Plotly figure: built here, filled and drawn by ``playground-heatmap.js``.

The figure has the same four traces whether it is empty (a new run, before its first
token) or replays a stored run; the page's module appends one column per token event:

0. ``cumulative``: heatmap, z[loop - 1][column] = cumulative exit probability at that loop
   for the token in that column, null where the loop was not computed;
1. ``not computed``: heatmap, 1 where the loop was skipped (the token had exited), else
   null; one flat grey that no value of the colour scale takes;
2. ``exit loop``: markers at (position, exit loop);
3. a legend-only square for the grey cells (heatmaps have no legend entry of their own).

x is the token position (prompt and generated, split by a dashed line once the first
generated token is known); y is the loop, 1..T. Plain dicts, as in ``atlas.charts``.
"""

import json
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

COLOURSCALE = "Viridis"  # dark purple (0) to yellow (1): no grey anywhere on it
NOT_COMPUTED = "#d4d4d8"
EXIT_MARKER = "#e11d48"
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
                "cumulative exit p",
                loops,
                colorscale=COLOURSCALE,
                colorbar={"title": {"text": "cumulative<br>exit p"}, "thickness": 12},
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
        ],
        "layout": heatmap_layout(loops=loops, trained_loops=trained_loops),
    }
    prompt_tokens, why = 0, iter(reasons)
    for event in tokens:
        reason = next(why, "")
        append_column(figure, event, loops=loops, reason=reason)
        prompt_tokens += event["phase"] == "prompt"
    if prompt_tokens and prompt_tokens < len(figure["data"][0]["x"]):
        figure["layout"]["shapes"].append(_prompt_boundary(prompt_tokens))
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
        "xgap": 1,
        "ygap": 1,
        "hoverongaps": False,
        "hovertemplate": "%{hovertext}<extra></extra>",
        **style,
    }


def heatmap_layout(*, loops: int, trained_loops: int | None = None) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": 140 + 34 * loops,
        "margin": {"l": 48, "r": 16, "t": 8, "b": 40},
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
        layout["annotations"] = [
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
        ]
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


def append_column(figure: dict[str, Any], event: Mapping, *, loops: int, reason: str = "") -> None:
    """Add one token's column (the same as the page's module does with a live event)."""
    cumulative, skipped, exit_marker, _ = figure["data"]
    position = event["position"]
    computed = {row["loop"]: row for row in event["loops"]}
    label = f"#{position} {_quoted(event['text'])} ({event['phase']})"
    for trace in (cumulative, skipped):
        trace["x"].append(position)
    for loop in range(1, loops + 1):
        row = computed.get(loop)
        if row is None:
            cumulative["z"][loop - 1].append(None)
            cumulative["hovertext"][loop - 1].append("")
            skipped["z"][loop - 1].append(1)
            skipped["hovertext"][loop - 1].append(
                f"{label}<br>loop {loop}: not computed (exited at loop {event['exit_loop']})"
            )
        else:
            cumulative["z"][loop - 1].append(row["cumulative"])
            cumulative["hovertext"][loop - 1].append(loop_text(label, row, event["exit_loop"]))
            skipped["z"][loop - 1].append(None)
            skipped["hovertext"][loop - 1].append("")
    exit_marker["x"].append(position)
    exit_marker["y"].append(event["exit_loop"])
    why = f" ({reason})" if reason else ""
    exit_marker["hovertext"].append(f"{label}: exits at loop {event['exit_loop']}{why}")


def loop_text(label: str, row: Mapping, exit_loop: int) -> str:
    """One computed cell's hover: λ, p, cumulative and the top-k prediction at that loop."""
    top = ", ".join(f"{_quoted(text)} {p:.2f}" for _, text, p in row["top"][:TOP_K_SHOWN])
    marker = " — exits here" if row["loop"] == exit_loop else ""
    return (
        f"{label}<br>loop {row['loop']}{marker}<br>"
        f"λ {_number(row['gate_lambda'])} · p {_number(row['exit_p'])} · "
        f"cumulative {_number(row['cumulative'])}<br>top: {top or '—'}"
    )


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _quoted(text: str) -> str:
    """A token's text as Plotly shows it safely: escaped (Plotly reads a subset of HTML)."""
    return escape(json.dumps(text, ensure_ascii=False)[1:-1].join("“”"), quote=False)
