"""Pointer chasing, the task whose answers need one loop per hop: generator, checker, batches.

A problem lists a successor function over ``symbols`` letters as pairs (``ac`` reads
"a is followed by c"), in random order, then asks queries ``{start}{hops}=`` whose answer
is the letter reached from ``start`` after ``hops`` steps::

    ac cd db ba;a3=b
    d1=b

Unlike a carry, which one attention hop can look ahead across ("the nearest lower column
whose sum is not 9"), a hop cannot be skipped: the letter to look up next is only known
once the previous lookup is done, so a layer does about one hop and a query of ``k`` hops
needs about ``k`` loops (``log k`` at best, composing hops that earlier positions already
chased). The successor function is one cycle through every letter, so ``k`` steps from a
letter never meet ``j < k`` steps from it again (``k < symbols``).

Each answer has its own query, so every scored position states its own difficulty (its
hops), and answers do not lean on each other the way a sum's digits lean on the digit
written before. Byte tokens, fixed layout: every problem of a batch has the same length.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

EOS = ord("\n")
LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class Problem:
    pairs: tuple[str, ...]  # "ac": a is followed by c; listed in this order
    queries: tuple[tuple[str, int], ...]  # (start, hops)

    @property
    def successor(self) -> dict[str, str]:
        return {pair[0]: pair[1] for pair in self.pairs}

    def walk(self, start: str, hops: int) -> str:
        successor, letter = self.successor, start
        for _ in range(hops):
            letter = successor[letter]
        return letter

    @property
    def answers(self) -> list[str]:
        return [self.walk(start, hops) for start, hops in self.queries]

    @property
    def hops(self) -> list[int]:
        """Each answer's difficulty: the hops its query asks for."""
        return [hops for _, hops in self.queries]

    @property
    def text(self) -> str:
        lines = [f"{s}{k}={a}\n" for (s, k), a in zip(self.queries, self.answers, strict=True)]
        return f"{' '.join(self.pairs)};" + "".join(lines)

    @property
    def prompt(self) -> str:
        """The pairs and the first query, up to its ``=``: what a person types."""
        start, hops = self.queries[0]
        return f"{' '.join(self.pairs)};{start}{hops}="

    @property
    def answer(self) -> str:
        return self.answers[0] + "\n"


def sample(rng: random.Random, symbols: int, hops: Sequence[int]) -> Problem:
    """A random cycle through the first ``symbols`` letters and one query per entry of
    ``hops``, each from a random start (0 < hops < symbols, so no answer wraps around)."""
    if not 2 <= symbols <= len(LETTERS):
        raise ValueError(f"symbols must be in 2..{len(LETTERS)}, got {symbols}")
    if any(not 0 < k < min(symbols, 10) for k in hops):
        raise ValueError(f"hops must be in 1..{min(symbols, 10) - 1}, got {list(hops)}")
    cycle = rng.sample(LETTERS[:symbols], symbols)
    pairs = [cycle[i] + cycle[(i + 1) % symbols] for i in range(symbols)]
    rng.shuffle(pairs)
    queries = tuple((rng.choice(cycle), k) for k in hops)
    return Problem(tuple(pairs), queries)


def check(problem: Problem, outputs: Sequence[str]) -> bool:
    """Exact match: one output per query, each the answer letter (a newline optional)."""
    return len(outputs) == len(problem.queries) and all(
        out.removesuffix("\n") == answer
        for out, answer in zip(outputs, problem.answers, strict=True)
    )


def problems(seed: int, n: int, symbols: int, hops: range, queries: int) -> list[Problem]:
    """``n`` problems from ``seed`` alone, ``queries`` each; query ``q`` of problem ``i``
    asks ``hops[(i + q) % len(hops)]``, so every difficulty is equally frequent in every
    query slot (cycling over all queries at once would tie a slot to some difficulties
    whenever ``queries`` and ``len(hops)`` share a factor)."""
    rng = random.Random(seed)
    return [
        sample(rng, symbols, [hops[(i + q) % len(hops)] for q in range(queries)]) for i in range(n)
    ]


def answer_positions(problem: Problem) -> list[int]:
    """Index in the text of each answer letter (each follows its query's ``=``)."""
    line = 3 * len(problem.pairs)  # the pairs and the ";" after them
    return [line + 5 * i + 3 for i in range(len(problem.queries))]


def encode(batch: list[Problem]) -> tuple[Tensor, Tensor]:
    """Byte ids of the texts (B, S+1) and the mask of the positions whose next token is an
    answer letter or the newline after it (B, S): the only ones the task's losses count."""
    ids = torch.tensor([list(p.text.encode()) for p in batch])  # (B, S+1)
    mask = torch.zeros(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool)  # (B, S)
    for i in answer_positions(batch[0]):
        mask[:, i - 1 : i + 1] = True
    return ids, mask


def loop_targets(batch: list[Problem], n_loops: int) -> Tensor:
    """Per-loop targets (T, B, S) that teach one hop per loop: the text's next tokens,
    except that a query's answer at loop t is the letter ``min(t - 1, hops)`` hops along
    (loop 1 the start letter, loop 2 one hop, ..., from loop hops + 1 on the answer)."""
    ids, _ = encode(batch)
    targets = ids[:, 1:].expand(n_loops, -1, -1).clone()  # (T, B, S)
    for row, problem in enumerate(batch):
        for at, (start, hops) in zip(answer_positions(problem), problem.queries, strict=True):
            for t in range(n_loops):
                targets[t, row, at - 1] = ord(problem.walk(start, min(t, hops)))
    return targets


def example_prompts(symbols: int, hops: range) -> list[str]:
    """One prompt per difficulty in ``hops`` over one successor function, for the model
    card and the playground."""
    rng = random.Random(symbols)
    problem = sample(rng, symbols, list(hops))
    pairs = " ".join(problem.pairs)
    return [f"{pairs};{start}{k}=" for start, k in problem.queries]
