"""Sibling runs for "Compare with…": the same prompt, model and seed, one setting changed.

In "same text" mode (the default) a sibling does not write its own text: it is scored on
the compared run's tokens with its own settings, so every position's depth compares; in
"free-running" mode it generates, and positions compare only up to where the texts part.

A variant is the settings a sibling changes (``{"q": 0.5}``, ``{"exit_rule": "fixed"}``,
``{"kv_policy": "select"}``); every other setting is the compared run's own. A preset is
the three settings of a common experiment; the run's own setting is one of them, so its
siblings are the other two (the first two of the preset when the run has none of them).
"""

from dataclasses import fields
from typing import Any

from kernels.params import KV_POLICIES, RunParams

COMPARE_SIBLINGS = 2  # with the run they are compared with: three side by side
# A "same text" sibling's parameter: the id of the run whose tokens it is scored on
# (teacher-forced with its own settings, ``kernels.teacher``) instead of writing its own.
TEXT_OF = "teacher_forced_of"
SAME_TEXT, FREE_RUNNING = "same-text", "free-running"
MODES = {
    SAME_TEXT: "same text: the siblings read this run's tokens (every position compared)",
    FREE_RUNNING: "free-running: each sibling writes its own text",
}
PRESETS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "q": ("q 0.5 / 0.7 / 0.9", [{"exit_rule": "q-exit", "q": q} for q in (0.5, 0.7, 0.9)]),
    "exit-rules": (
        "three exit rules (Q-exit, convergence, fixed)",
        [{"exit_rule": rule} for rule in ("q-exit", "convergence", "fixed")],
    ),
    "kv-policies": (
        "three KV policies",
        [{"kv_policy": policy} for policy in KV_POLICIES[:3]],
    ),
    "kv-reuse": (
        "one K/V plane per position: exit loop's / loop 1's (Ouro's last- / first-step-only)",
        [{"kv_policy": policy} for policy in ("exit-kv", "first-loop-kv")],
    ),
}
PARAM_NAMES = frozenset(field.name for field in fields(RunParams))


def run_settings(run: Any) -> dict[str, Any]:
    """The run's ``RunParams`` fields and ``extrapolate`` (defaults where it stored none)."""
    stored = run.params or {}
    known = {name: stored[name] for name in PARAM_NAMES if name in stored}
    return vars(RunParams(**known)) | {"extrapolate": bool(stored.get("extrapolate"))}


def sibling_params(run: Any, variant: dict[str, Any]) -> dict[str, Any]:
    """The settings of a sibling of ``run`` that changes ``variant``'s settings only (a
    rule's own parameter comes with it: fixed needs its loop count, which is the run's T)."""
    params = run_settings(run) | {k: v for k, v in variant.items() if k in PARAM_NAMES}
    if params["exit_rule"] == "fixed" and params["fixed_loops"] is None:
        params["fixed_loops"] = params["loops"] or run.trained_loops
    elif params["exit_rule"] != "fixed":
        params["fixed_loops"] = None
    return params


def preset_variants(run: Any, preset: str) -> list[dict[str, Any]]:
    """The preset's variants that the run does not already have, at most
    ``COMPARE_SIBLINGS``."""
    own = run_settings(run)
    others = [
        variant
        for variant in PRESETS[preset][1]
        if any(own.get(name) != value for name, value in variant.items())
    ]
    return others[:COMPARE_SIBLINGS]


def full_depth_variant(run: Any) -> dict[str, Any]:
    """What a full-depth sibling changes: every position runs all T loops (fixed at the
    run's T) with a logit lens, so each position's settling loop is known."""
    return {"exit_rule": "fixed", "fixed_loops": None, "top_k": max(run_settings(run)["top_k"], 1)}
