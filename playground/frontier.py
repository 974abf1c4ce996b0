"""A stored frontier point as a playground setting to try: the form's query string.

Points name their setting as the offline sweep writes it (``kernels.offline.frontier``):
``q=0.5`` (Q-exit), ``kl<0.001`` (convergence), ``k=3`` (fixed: exactly k loops),
``eps=0.01`` (ACT) and ``seed=0`` (PonderNet's seeded draws).
"""

import re
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from playground.checkpoints import ModelInfo

SETTING_FIELDS = {"q": "q", "kl<": "kl_threshold", "k": "loops", "eps": "act_eps", "seed": "seed"}
SETTING = re.compile(r"^(?P<name>q|kl<|k|eps|seed)=?(?P<value>[0-9.eE+-]+)$")


def point_settings(point: dict[str, Any]) -> dict[str, str]:
    """The form fields of one point: its rule, KV policy and the rule's own parameter."""
    settings = {"exit_rule": str(point.get("rule", "")), "kv_policy": str(point.get("policy", ""))}
    found = SETTING.match(str(point.get("setting", "")).replace(" ", ""))
    if found:
        settings[SETTING_FIELDS[found["name"]]] = found["value"]
    return {name: value for name, value in settings.items() if value}


def point_try_url(*, model: ModelInfo, point: dict[str, Any]) -> str:
    """The playground form prefilled with the model, the point's setting and an example
    prompt of the model."""
    query = {"model": model.name, **point_settings(point)}
    if model.examples:
        query["prompt"] = model.examples[0]
    return f"{reverse('playground:index')}?{urlencode(query)}"
