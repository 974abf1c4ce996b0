"""The generated tasks a model trains on, behind one interface for training and evaluation.

A task model's settings (``training.json``'s, as a dict) name the task and its sizes;
everything here reads them, so training, evaluation, the frontier and the card agree on
the problems without each knowing the tasks. Two tasks: ``addition``
(:mod:`kernels.offline.addition`, difficulty = carry chain) and ``hops``
(:mod:`kernels.offline.hops`, difficulty = hops of a query). Both answer in byte tokens
and end each answer with a newline, the models' EOS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from kernels.offline import addition, hops

EOS = ord("\n")
assert addition.EOS == hops.EOS == EOS

Problem = addition.Problem | hops.Problem


def describe(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The task's sizes, for ``training.json``'s corpus record."""
    keys: tuple[str, ...] = ("digits", "max_chain")
    if settings["task"] == "hops":
        keys = ("symbols", "max_hops", "queries")
    return {"task": settings["task"], **{k: settings[k] for k in keys}}


def trained_levels(settings: Mapping[str, Any]) -> range:
    """The difficulties training draws (longest carry chain; hops per query)."""
    if settings["task"] == "hops":
        return range(1, settings["max_hops"] + 1)
    return range(settings["max_chain"] + 1)


def longer_levels(settings: Mapping[str, Any]) -> range:
    """Difficulties beyond any trained one that the problem size still allows."""
    if settings["task"] == "hops":
        return range(settings["max_hops"] + 1, min(settings["symbols"], 10))
    return range(settings["max_chain"] + 1, settings["digits"] + 1)


def problems(
    settings: Mapping[str, Any], seed: int, n: int, levels: range | None = None
) -> list[Problem]:
    """``n`` problems from ``seed`` alone, cycling through ``levels`` (default: trained)."""
    levels = trained_levels(settings) if levels is None else levels
    if settings["task"] == "hops":
        return list(hops.problems(seed, n, settings["symbols"], levels, settings["queries"]))
    return list(addition.problems(seed, n, settings["digits"], levels))


def encode(problems: list[Problem]) -> tuple[Tensor, Tensor]:
    """Byte ids (B, S+1) and the mask of the scored positions (B, S)."""
    if isinstance(problems[0], hops.Problem):
        return hops.encode([p for p in problems if isinstance(p, hops.Problem)])
    return addition.encode([p for p in problems if isinstance(p, addition.Problem)])


def batch(settings: Mapping[str, Any], seed: int, n: int) -> tuple[Tensor, Tensor]:
    """A batch of ``n`` problems from ``seed`` alone: ids (B, S+1) and mask (B, S)."""
    return encode(problems(settings, seed, n))


def difficulty_name(settings: Mapping[str, Any]) -> str:
    """What an answer position's difficulty counts, for tables and plots."""
    return "hops" if settings["task"] == "hops" else "carry chain"


def unit_right(problems: list[Problem], right: Tensor) -> Tensor:
    """Per scored position right (B, M) -> per answer right (B, U): an answer is one
    query's letter and newline (hops), or a whole sum (addition)."""
    if isinstance(problems[0], hops.Problem):
        return right.view(len(problems), -1, 2).all(-1)  # (B, queries)
    return right.all(-1, keepdim=True)  # (B, 1)


def unit_levels(problems: list[Problem]) -> Tensor:
    """Each answer's difficulty (B, U): its hops, or the sum's longest carry chain."""
    return torch.tensor(
        [p.hops if isinstance(p, hops.Problem) else [addition.difficulty(p)] for p in problems]
    )


def position_levels(problems: list[Problem]) -> Tensor:
    """Each scored position's difficulty (B, M), -1 where it has none (a newline): the
    query's hops at its answer letter; the carry chain into a digit's column."""
    rows = []
    for p in problems:
        if isinstance(p, hops.Problem):
            rows.append([level for k in p.hops for level in (k, -1)])
        else:
            rows.append([*addition.carry_chains(p.a, p.b, p.digits), -1])
    return torch.tensor(rows)


def example_prompts(settings: Mapping[str, Any]) -> list[str]:
    """Prompts of increasing difficulty, for the model card and the playground."""
    if settings["task"] == "hops":
        return hops.example_prompts(settings["symbols"], trained_levels(settings))
    return addition.example_prompts(settings["digits"])
