"""Multi-digit addition, the task whose answers need depth: generator, checker, batches.

A problem is ``"{a:0Nd}+{b:0Nd}="`` and its answer ``"{a+b:0(N+1)d}\\n"``, most significant
digit first, so a digit depends on carries from every column below it that the model has
not written yet: resolving a carry chain (a column whose digits sum to 10 or more, then
columns summing to exactly 9 that pass the carry on) takes one refinement per column,
which is what the loops give. Byte tokens, fixed width: every problem has the same
layout, so the answer's positions are a fixed slice.

Difficulty of a problem is its longest carry chain; of an answer digit, the length of the
chain that carries into its column (0: no carry). Problems are drawn with a chosen
longest chain (uniform over ``0..max_chain`` in training), so long chains, rare in random
numbers (a 9-sum column has probability 1/10), are as frequent as short ones.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor

from kernels.difficulty import carry_chains

EOS = ord("\n")


@dataclass(frozen=True)
class Problem:
    a: int
    b: int
    digits: int

    @property
    def prompt(self) -> str:
        return f"{self.a:0{self.digits}d}+{self.b:0{self.digits}d}="

    @property
    def answer(self) -> str:
        return f"{self.a + self.b:0{self.digits + 1}d}\n"

    @property
    def text(self) -> str:
        return self.prompt + self.answer


def difficulty(problem: Problem) -> int:
    return max(carry_chains(problem.a, problem.b, problem.digits))


def sample(rng: random.Random, digits: int, chain: int) -> Problem:
    """A problem whose longest carry chain is exactly ``chain`` (0 <= chain <= digits).

    The chain is planted (a generating column, then ``chain - 1`` columns summing to 9);
    the other columns are random and the draw is repeated until no other chain is longer.
    """
    if not 0 <= chain <= digits:
        raise ValueError(f"chain must be in 0..{digits}, got {chain}")
    while True:
        sums = [rng.randrange(0, 19) for _ in range(digits)]  # column sums, LSB first
        if chain:
            start = rng.randrange(0, digits - chain + 1)
            sums[start] = rng.randrange(10, 19)
            for col in range(start + 1, start + chain):
                sums[col] = 9
            if start + chain < digits and sums[start + chain] == 9:
                sums[start + chain] = rng.choice([s for s in range(19) if s != 9])
        else:
            sums = [rng.randrange(0, 10) for _ in range(digits)]
        xs = [rng.randrange(max(0, s - 9), min(9, s) + 1) for s in sums]
        a = int("".join(str(x) for x in reversed(xs)))
        b = int("".join(str(s - x) for s, x in zip(reversed(sums), reversed(xs), strict=True)))
        problem = Problem(a, b, digits)
        if difficulty(problem) == chain:
            return problem


def check(problem: Problem, output: str) -> bool:
    """Exact match: the output is the answer's digits (its trailing newline optional)."""
    return output.removesuffix("\n") == problem.answer.removesuffix("\n")


def answer_start(digits: int) -> int:
    """Index of the answer's first character in a problem's text."""
    return 2 * digits + 2


def problems(seed: int, n: int, digits: int, chains: range) -> list[Problem]:
    """``n`` problems from ``seed`` alone, their longest chains cycling through ``chains``."""
    rng = random.Random(seed)
    return [sample(rng, digits, chains[i % len(chains)]) for i in range(n)]


def encode(batch: list[Problem]) -> tuple[Tensor, Tensor]:
    """Byte ids of the texts (B, S+1) and the mask of the positions whose next token is an
    answer character (B, S): the only ones the task's losses count."""
    ids = torch.tensor([list(p.text.encode()) for p in batch])  # (B, S+1)
    start = answer_start(batch[0].digits)
    mask = torch.zeros(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool)  # (B, S)
    mask[:, start - 1 :] = True
    return ids, mask


def example_prompts(digits: int) -> list[str]:
    """Prompts of increasing difficulty (longest carry chain 0, 1, a third, two thirds and
    all of the width), for the model card and the playground."""
    rng = random.Random(digits)
    chains = sorted({0, 1, digits // 3, 2 * digits // 3, digits})
    return [sample(rng, digits, c).prompt for c in chains]
