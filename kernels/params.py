"""A run's generation settings, defined once: fields, defaults and fixed bounds.

Torch-free, so the web process validates with it without loading the engine. The API
serializer and the page form (``playground``) build their fields from ``RunParams``,
``BOUNDS`` and ``CHOICES``, and the engine's ``kernels.request.GenerationParams`` is
``RunParams`` plus what needs torch (the exit rule object, the sampler). Bounds that depend
on a model (loops beyond its trained T, prompt + new tokens within its positions) are
checked where the model is known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Self

EXIT_RULES = ("q-exit", "convergence", "fixed", "ponder", "act")
KV_POLICIES = ("best-available", "select", "recompute-kv", "exit-kv", "first-loop-kv")
MAX_LOOPS = 32  # any T a model may run at (2 × its trained T is checked per model)


@dataclass(frozen=True)
class Bound:
    """A closed interval ``[low, high]``, or ``(low, high]`` when ``low_open``; with
    ``or_from``, ``low`` itself or ``[or_from, high]`` (the values between are refused)."""

    low: float
    high: float
    low_open: bool = False
    or_from: float | None = None

    def contains(self, value: float) -> bool:
        if not math.isfinite(value) or value > self.high:
            return False
        if self.or_from is not None and value != self.low:
            return value >= self.or_from
        return value > self.low if self.low_open else value >= self.low

    def describe(self) -> str:
        """The bound in words, for error messages: ``must lie in (0, 1]``, or ``must be 0
        or lie in [0.05, 5]``."""
        low, high = _number(self.low), _number(self.high)
        if self.or_from is not None:
            return f"must be {low} or lie in [{_number(self.or_from)}, {high}]"
        return f"must lie in {'(' if self.low_open else '['}{low}, {high}]"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)


BOUNDS: dict[str, Bound] = {
    "max_new_tokens": Bound(0, 256),
    "q": Bound(0, 1, low_open=True),
    "kl_threshold": Bound(0, 10, low_open=True),  # nats; above a few every loop "converges"
    "fixed_loops": Bound(1, MAX_LOOPS),
    "act_eps": Bound(0, 0.5),  # act: halt once the gates sum to 1 - act_eps
    "loops": Bound(1, MAX_LOOPS),
    # 0 = greedy; beyond 5 sampling is near uniform noise. Below 0.05 a one-logit lead of
    # the top token becomes e^20 to 1, greedy in all but name, so ask for 0; the sampler
    # draws in float64, where 0.05 scales any float32 logit far inside its range.
    "temperature": Bound(0, 5, or_from=0.05),
    # the top token always stays, so any top_p > 0 samples; a nucleus under 1% of the
    # mass is that token alone on any peaked distribution, and the bound says so
    "top_p": Bound(0.01, 1),
    "seed": Bound(0, 2**63 - 1),
    "top_k": Bound(0, 20),  # logit-lens width per computed loop
}
CHOICES: dict[str, tuple[str, ...]] = {"exit_rule": EXIT_RULES, "kv_policy": KV_POLICIES}


@dataclass
class RunParams:
    """One run's settings; every field is bounded by ``BOUNDS`` or ``CHOICES``."""

    max_new_tokens: int = 64
    exit_rule: str = "q-exit"  # one of EXIT_RULES
    q: float = 0.7  # q-exit threshold in (0, 1]
    kl_threshold: float = 1e-3  # convergence: exit when KL(p_{t-1} ‖ p_t) < threshold
    fixed_loops: int | None = None  # fixed: exit after this many loops
    act_eps: float = 0.01  # act: exit once the gates sum to 1 - act_eps
    loops: int | None = None  # T at inference; None = the checkpoint's total_ut_steps
    kv_policy: str = "best-available"  # one of KV_POLICIES
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int = 0
    top_k: int = 5

    def errors(self) -> dict[str, str]:
        """Each field outside its bound or choices, with the rule it breaks."""
        errors: dict[str, str] = {}
        for name, bound in BOUNDS.items():
            value = getattr(self, name)
            if value is not None and not bound.contains(value):
                errors[name] = bound.describe()
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                errors[name] = f"must be one of {', '.join(choices)}"
        if self.exit_rule == "fixed" and self.fixed_loops is None:
            errors["fixed_loops"] = "the fixed exit rule needs fixed_loops"
        return errors

    def validate(self) -> Self:
        """Raise ``ValueError`` naming every field out of bounds."""
        errors = self.errors()
        if errors:
            raise ValueError("; ".join(f"{name} {rule}" for name, rule in errors.items()))
        return self
