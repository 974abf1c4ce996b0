"""Self-speculative decoding with the loops themselves: a row's round of drafts.

A looped model carries its own draft model, its first loops. A speculative row (settings
``draft_loops`` d and ``draft_tokens`` k) decodes in rounds: its current token and then
up to k drafted tokens run through loops 1 … d only (the run's own rule, capped at d),
each draft sampled as the run samples; then the current token and the drafts run in one
chunked pass under the run's own rule, policy and cap (:meth:`kernels.runner.StepRunner.
verify`), and the longest prefix the verified distributions agree with is kept (greedy:
the verified argmax; sampling: the standard speculative-sampling test, drawn from the
run's own generator, so a run replays from its seed). The first rejected position takes
the verified token (from the residual distribution when sampling), or, if every draft
was accepted, the token the last verified position predicts: it is the next round's
current token. Greedy, a speculative run's tokens, exits and cache are the plain run's;
sampling, each token is distributed as the plain run's.

This module holds a round's plain-Python state and the acceptance test; the decode
driver (:mod:`kernels.decode`) runs the drafts as ordinary decode steps beside other rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from kernels.sampling import Sampler
from kernels.scheduler import RowSettings, RowState


@dataclass
class Round:
    """One speculative row's round: its current token, then the drafts after it."""

    settings: RowSettings  # the run's own
    draft: RowSettings  # the same, capped at the draft depth
    origin: RowState  # the row as the round began (its current token at loop 1)
    loop_lens: list[int]  # the row's loop-store entries then, per loop
    length: int  # drafts to make: k, or fewer where the run has fewer tokens left
    sampler: Sampler
    stream: int  # the sampler's generator for this run
    mark: str  # how the current token was chosen: "accepted" or "verified"
    tokens: list[int] = field(default_factory=list)  # current token, then the drafts
    proposals: list[Tensor | None] = field(default_factory=list)  # (V,) each; None: greedy

    @property
    def drafts(self) -> list[int]:
        return self.tokens[1:]

    def propose(self, logits: Tensor) -> int:
        """The next draft, drawn from the draft's output logits (V,) as the run draws."""
        q = self.sampler.distribution(logits)
        token = _greedy_rows(logits[None])[0] if q is None else self.sampler.draw(q, self.stream)
        self.tokens.append(token)
        self.proposals.append(q)
        return token

    @property
    def drafted(self) -> bool:
        """Every draft is made (or the last one ends the run, so none follows it)."""
        drafts = self.drafts
        return len(drafts) >= self.length or (
            bool(drafts) and drafts[-1] == self.settings.eos_token_id
        )

    def accept(self, logits: Tensor) -> tuple[int, int]:
        """-> (drafts accepted, the token after them), from the verified logits (W, V) of
        the current token and the drafts (position i predicts draft i + 1)."""
        drafts = self.drafts
        if self.sampler.temperature == 0.0:  # greedy: the verified argmax, in one read
            targets = _greedy_rows(logits[: len(drafts) + 1])
            for i, token in enumerate(drafts):
                if token != targets[i]:
                    return i, targets[i]
            return len(drafts), targets[len(drafts)]
        for i, token in enumerate(drafts):
            p = self._distribution(logits[i])
            q = self.proposals[i]
            q = _one_hot(token, len(p)) if q is None else q
            if self.sampler.uniform(self.stream) * float(q[token]) < float(p[token]):
                continue  # accepted with probability min(1, p/q)
            residual = (p - q).clamp(min=0.0)
            if not float(residual.sum()) > 0.0:
                residual = p
            return i, self.sampler.draw(residual, self.stream)
        p = self._distribution(logits[len(drafts)])
        return len(drafts), self.sampler.draw(p, self.stream)

    def _distribution(self, logits: Tensor) -> Tensor:
        """(V,) float64: what the run draws from; the greedy token's point mass where the
        sampler falls back to greedy."""
        p = self.sampler.distribution(logits)
        return _one_hot(_greedy_rows(logits[None])[0], logits.shape[-1]) if p is None else p


def _greedy_rows(logits: Tensor) -> list[int]:
    """(N, V) -> each row's top token as :func:`kernels.sampling.greedy` picks it."""
    return logits.nan_to_num(nan=-math.inf, posinf=math.inf, neginf=-math.inf).argmax(-1).tolist()


def _one_hot(token: int, vocab: int) -> Tensor:
    p = torch.zeros(vocab, dtype=torch.float64)
    p[token] = 1.0
    return p
