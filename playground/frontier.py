"""A stored frontier point as a playground setting to try: the form's query string.

Points name their setting as the offline sweep writes it (``kernels.offline.frontier``):
``q=0.5`` (Q-exit), ``kl<0.001`` (convergence), ``k=3`` (fixed: exactly k loops),
``eps=0.01`` (ACT) and ``seed=0`` (PonderNet's seeded draws). The frontier's header says
how every point was measured (its trained loops T, greedy decoding of ``new_tokens`` per
prompt), so a link carries all of it and the run it starts reproduces the point.
"""

import re
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from playground.checkpoints import ModelInfo
from playground.pages import byte_size

SETTING_FIELDS = {"q": "q", "kl<": "kl_threshold", "k": "loops", "eps": "act_eps", "seed": "seed"}
SETTING = re.compile(r"^(?P<name>q|kl<|k|eps|seed)=?(?P<value>[0-9.eE+-]+)$")
# The query parameter that names the point a link came from (``point_label``).
POINT_PARAMETER = "frontier_point"


def point_settings(point: dict[str, Any], frontier: dict[str, Any]) -> dict[str, str]:
    """The form fields of one point: its rule and that rule's parameter, its KV policy,
    and how the sweep ran it (T, greedy, the new tokens per prompt). A fixed-k point runs
    exactly k loops, which the form expresses as T = k."""
    settings = {
        "exit_rule": str(point.get("rule", "")),
        "kv_policy": str(point.get("policy", "")),
        "loops": str(frontier.get("loops") or ""),
        "decoding": str(frontier.get("decoding", "greedy")),
        "max_new_tokens": str(frontier.get("new_tokens") or ""),
    }
    found = SETTING.match(str(point.get("setting", "")).replace(" ", ""))
    if found:
        settings[SETTING_FIELDS[found["name"]]] = found["value"]
    return {name: value for name, value in settings.items() if value}


def point_label(point: dict[str, Any]) -> str:
    """A point's name as the table shows it: ``q-exit q=0.7 · best-available``."""
    return f"{point.get('rule', '')} {point.get('setting', '')} · {point.get('policy', '')}"


def point_find(frontier: dict[str, Any] | None, label: str) -> dict[str, Any] | None:
    """The stored point a link names, or None (a hand-edited link names nothing)."""
    points = [] if frontier is None else frontier.get("points", [])
    return next((p for p in points if isinstance(p, dict) and point_label(p) == label), None)


def point_try_url(*, model: ModelInfo, frontier: dict[str, Any], point: dict[str, Any]) -> str:
    """The playground form prefilled with the model, every setting of the point, the
    point's name (the form says where its settings came from) and an example prompt."""
    query = {"model": model.name, **point_settings(point, frontier)}
    query[POINT_PARAMETER] = point_label(point)
    if model.examples:
        query["prompt"] = model.examples[0]
    return f"{reverse('playground:index')}?{urlencode(query)}"


def pareto_keys(points: list[dict[str, Any]]) -> set[int]:
    """Indexes of the points no other point beats: none reaches at least their accuracy
    with at most their executed work, better in one of the two."""

    def beats(a: dict[str, Any], b: dict[str, Any]) -> bool:
        at_least = (
            a["accuracy"] >= b["accuracy"] and a["executed_fraction"] <= b["executed_fraction"]
        )
        better = a["accuracy"] > b["accuracy"] or a["executed_fraction"] < b["executed_fraction"]
        return at_least and better

    return {i for i, p in enumerate(points) if not any(beats(other, p) for other in points)}


def full_depth_point(points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The reference every point is measured against: q = 1 with best-available KV."""
    return next((p for p in points if (p["rule"], p["setting"], p["policy"]) == FULL_DEPTH), None)


FULL_DEPTH = ("q-exit", "q=1.0", "best-available")


def frontier_rows(frontier: dict[str, Any]) -> list[dict[str, Any]]:
    """The points as the Frontier view shows them: accuracy's difference from full depth,
    whether the point is on the Pareto envelope, ratios with their range, KV in bytes
    people read."""
    points = [p for p in frontier["points"] if isinstance(p, dict)]
    envelope, full = pareto_keys(points), full_depth_point(points)
    rows = []
    for i, point in enumerate(points):
        delta = None if full is None else round(point["accuracy"] - full["accuracy"], 4)
        rows.append(
            point
            | {
                "label": point_label(point),
                "pareto": i in envelope,
                "full_depth": point is full,
                "delta": delta,
                "peak_kv": byte_size(point.get("peak_kv_bytes")),
                "prefill": _ratio(point, "latency"),
                "decode": _ratio(point, "decode"),
            }
        )
    return rows


def _ratio(point: dict[str, Any], kind: str) -> str:
    """``0.62× (0.58–0.70)``: the median ratio to full depth and its repeats' range."""
    median = point.get(f"{kind}_ratio")
    if median is None:
        return "—"
    low, high = point.get(f"{kind}_ratio_low"), point.get(f"{kind}_ratio_high")
    spread = "" if low is None or high is None or low == high else f" ({low:.2f}–{high:.2f})"
    return f"{median:.2f}×{spread}"


def depth_tables(frontier: dict[str, Any]) -> dict[str, Any] | None:
    """How much depth was needed (``kernels.offline.frontier.depth_needed``) as the view
    shows it: each rule setting's calibration against the settling loops, the oracle point
    and the KV policies side by side, each with its peak KV in bytes people read, and by
    difficulty the rows of every rule's default. None when the frontier has none."""
    rows = [r for r in frontier.get("calibration") or [] if isinstance(r, dict)]
    if not rows:
        return None

    def readable(points: Any) -> list[dict[str, Any]]:
        good = [p for p in points or [] if isinstance(p, dict)]
        return [p | {"peak_kv": byte_size(p.get("peak_kv_bytes"))} for p in good]

    calibration = [row | {"label": f"{row['rule']} {row['setting']}"} for row in rows]
    return {
        "settling": frontier.get("settling") or {},
        "levels": frontier.get("levels", "level"),
        "calibration": calibration,
        "by_level": [
            level | {"label": row["label"]}
            for row in calibration
            if row.get("default")
            for level in row.get("by_level") or []
        ],
        "oracle": readable(frontier.get("oracle")),
        "policies": readable(frontier.get("policies")),
    }
