"""The taxonomy's implications, as rules every work must satisfy.

A facet value is a claim; some claims imply others (a fixed depth has no granularity,
a retrofit needs a retrofit or training-free regime). The loader refuses a file that
breaks a rule, ``atlas_report`` lists every break, and both name the rule, so a curator
fixes the row rather than the rule.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Values = Mapping[str, Any]

# Settings with no autoregressive decoding, so no KV cache to speak of.
NON_AUTOREGRESSIVE_MODALITIES = frozenset({"vision", "diffusion-generation"})
# A learned stop decision is taken per token, per input, per denoising/RL step or per layer.
STOP_GRANULARITIES = ("token", "sequence", "step", "layer")


@dataclass(frozen=True)
class Rule:
    """One implication: ``holds(values)`` is False exactly when a work breaks it."""

    name: str
    statement: str
    holds: Callable[[Values], bool]


def _fixed_means_no_granularity(v: Values) -> bool:
    return (v["depth_control"] == "fixed") == (v["depth_granularity"] == "none")


def _stopping_has_granularity(v: Values) -> bool:
    if v["depth_control"] not in ("exit-gate", "halting"):
        return True
    return v["depth_granularity"] in STOP_GRANULARITIES


def _router_is_per_token_or_input(v: Values) -> bool:
    return v["depth_control"] != "router" or v["depth_granularity"] in ("token", "sequence")


def _per_token_cache_means_per_token_depth(v: Values) -> bool:
    per_token = v["kv_strategy"] in ("best-available", "recursion-wise")
    return not per_token or v["depth_granularity"] == "token"


def _token_routed_has_router(v: Values) -> bool:
    return v["recurrence_family"] != "token-routed" or v["depth_control"] == "router"


def _retrofit_regime(v: Values) -> bool:
    if "retrofit" not in v["contribution"]:
        return True
    return v["training_regime"] in ("retrofit", "training-free")


def _retrofit_regime_is_contributed(v: Values) -> bool:
    return v["training_regime"] != "retrofit" or "retrofit" in v["contribution"]


def _non_autoregressive_no_kv(v: Values) -> bool:
    modalities = set(v["modality"])
    if not modalities or not modalities <= NON_AUTOREGRESSIVE_MODALITIES:
        return True
    return v["kv_strategy"] == "no-kv"


def _puzzle_reasoners_no_kv(v: Values) -> bool:
    puzzle_only = v["modality"] == ["algorithmic"] and "hrm-trm" in v["topics"]
    return not puzzle_only or v["kv_strategy"] == "no-kv"


def _analysis_builds_nothing(v: Values) -> bool:
    return v["recurrence_family"] != "analysis" or "architecture" not in v["contribution"]


def _scaling_laws_train(v: Values) -> bool:
    return "scaling-law" not in v["contribution"] or v["training_regime"] == "from-scratch"


RULES: tuple[Rule, ...] = (
    Rule(
        "fixed-depth-granularity",
        "depth_control 'fixed' goes with depth_granularity 'none', and only it",
        _fixed_means_no_granularity,
    ),
    Rule(
        "stopping-granularity",
        "an exit-gate or halting depth control decides per token, sequence, step or layer "
        "(per-question stoppers are 'sequence' unless a source says per token)",
        _stopping_has_granularity,
    ),
    Rule(
        "router-granularity",
        "a router assigns depth per token or per input",
        _router_is_per_token_or_input,
    ),
    Rule(
        "per-token-cache",
        "a best-available or recursion-wise KV cache implies per-token depth",
        _per_token_cache_means_per_token_depth,
    ),
    Rule(
        "token-routed-router",
        "token-routed recursion has depth_control 'router'",
        _token_routed_has_router,
    ),
    Rule(
        "retrofit-regime",
        "a retrofit contribution goes with a retrofit or training-free regime",
        _retrofit_regime,
    ),
    Rule(
        "retrofit-contribution",
        "a retrofit training regime goes with a retrofit contribution",
        _retrofit_regime_is_contributed,
    ),
    Rule(
        "non-autoregressive-no-kv",
        "vision and diffusion works (non-autoregressive settings) have kv_strategy 'no-kv'",
        _non_autoregressive_no_kv,
    ),
    Rule(
        "puzzle-reasoner-no-kv",
        "HRM/TRM-style reasoners on puzzles refine the whole answer at once: 'no-kv'",
        _puzzle_reasoners_no_kv,
    ),
    Rule(
        "analysis-no-architecture",
        "the 'analysis' family builds no new architecture",
        _analysis_builds_nothing,
    ),
    Rule(
        "scaling-law-from-scratch",
        "scaling-law studies fit laws on training runs: training_regime 'from-scratch'",
        _scaling_laws_train,
    ),
)


def rules_broken(values: Values, rules: Sequence[Rule] = RULES) -> list[Rule]:
    """The rules a work's (checked) values break, in the order of ``RULES``."""
    return [rule for rule in rules if not rule.holds(values)]


class _Reads(dict):
    """A work's values that note which ones are read."""

    def __init__(self, values: Values) -> None:
        super().__init__(values)
        self.read: list[str] = []

    def __getitem__(self, name: str) -> Any:
        self.read.append(name)
        return super().__getitem__(name)


def rule_fields(rule: Rule, values: Values) -> list[str]:
    """The fields ``rule`` reads to judge ``values``: for a broken rule, the fields a
    person may change to mend it (an error names them)."""
    reads = _Reads(values)
    rule.holds(reads)
    return list(dict.fromkeys(reads.read))
