"""Next-token sampling: greedy, temperature and nucleus (top-p), seeded per sequence."""

from __future__ import annotations

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
        if self.temperature == 0.0:
            return int(logits.argmax())
        probs = torch.softmax(logits.float().cpu() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            before = sorted_probs.cumsum(-1) - sorted_probs  # mass ranked above each token
            sorted_probs[before >= self.top_p] = 0.0  # the top token always stays
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        return int(torch.multinomial(probs, 1, generator=self._generator(row)))
