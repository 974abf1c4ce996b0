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
