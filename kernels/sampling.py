"""Next-token sampling: greedy, temperature and nucleus (top-p), seeded per sequence.

A draw never raises for a valid setting, whatever the logits: it is computed in float64
(a small temperature scales float32 logits far inside its range, and a small top-p is not
rounded to 0), the top token always survives top-p, and logits that give no distribution
(NaN, +inf, all -inf) fall back to the greedy token. A batch samples every row in Python
between steps, so one row's bad draw must not end the others' runs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class Sampler:
    """Draws token ids; one CPU generator per sequence, so a row's draws never depend on how
    the engine interleaves rows (the same seed gives the same tokens on any device)."""

    def __init__(self, *, temperature: float = 0.0, top_p: float = 1.0, seed: int = 0) -> None:
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
        self.temperature, self.top_p, self.seed = temperature, top_p, seed
        self._generators: dict[int, torch.Generator] = {}

    def _generator(self, row: int) -> torch.Generator:
        if row not in self._generators:
            self._generators[row] = torch.Generator().manual_seed(self.seed + row)
        return self._generators[row]

    def __call__(self, logits: Tensor, row: int = 0) -> int:
        """logits (V,) of one sequence -> a token id."""
        probs = self.distribution(logits)
        return greedy(logits) if probs is None else self.draw(probs, row)

    def distribution(self, logits: Tensor) -> Tensor | None:
        """logits (V,) -> the (V,) float64 CPU distribution a draw samples from (after
        temperature and top-p), or None where the draw is the greedy token."""
        if self.temperature == 0.0:
            return None
        probs = torch.softmax(logits.detach().to("cpu", torch.float64) / self.temperature, -1)
        if not bool(probs.isfinite().all()):  # NaN or +inf logits, or every one -inf
            return None
        if self.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            before = sorted_probs.cumsum(-1) - sorted_probs  # mass ranked above each token
            outside = before >= self.top_p
            outside[0] = False  # the top token always stays, however small top_p is
            sorted_probs[outside] = 0.0
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        return probs

    def draw(self, probs: Tensor, row: int = 0) -> int:
        """A token from ``probs`` (V,) (any non-negative weights), by ``row``'s generator."""
        return int(torch.multinomial(probs, 1, generator=self._generator(row)))

    def uniform(self, row: int = 0) -> float:
        """A uniform draw in [0, 1) from ``row``'s generator (speculative acceptance)."""
        return float(torch.rand((), dtype=torch.float64, generator=self._generator(row)))


def greedy(logits: Tensor) -> int:
    """The top token (the first of equals); a NaN never wins and a +inf always does, so
    any logits give a token (0 when every one is NaN). One read back from the device."""
    # argmax would rank a NaN first: NaN -> -inf, the infinities kept as they are
    return int(logits.nan_to_num(nan=-math.inf, posinf=math.inf, neginf=-math.inf).argmax())
