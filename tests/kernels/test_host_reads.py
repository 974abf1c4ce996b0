"""Reads back from the device in a decode step: each stalls a GPU step, so a step makes
one (its stops), one more for the records of the tokens that stopped, and one per token
sampled."""

import torch

from kernels.batch import ContinuousBatch
from kernels.offline.host_reads import count_host_reads
from kernels.request import GenerationParams

REQUESTS = [
    ("def f(x):", GenerationParams(max_new_tokens=5, q=0.6, top_k=3)),
    ("import os", GenerationParams(max_new_tokens=4, exit_rule="convergence", kv_policy="select")),
    ("class A:", GenerationParams(max_new_tokens=6, q=0.5, kv_policy="recompute-kv", top_k=0)),
    ("x = 1", GenerationParams(max_new_tokens=3, exit_rule="act", act_eps=0.3, loops=6)),
]


def test_a_read_counts_once_however_it_is_made():
    x = torch.arange(4.0)

    with count_host_reads() as reads:
        x.tolist()
        float(x.sum())  # item() inside counts with it
        bool(x.any())
        y = x * 2  # no read

    assert reads == ["tolist", "__float__", "__bool__"]
    assert y.tolist() == [0.0, 2.0, 4.0, 6.0] and reads == ["tolist", "__float__", "__bool__"]


def test_a_decode_step_reads_its_stops_once_and_its_stopped_tokens_once(ouro_tiny):
    # given four requests on different rules, policies, caps and lenses in one batch
    batch = ContinuousBatch(ouro_tiny, max_rows=4)
    for key, (prompt, params) in enumerate(REQUESTS):
        batch.add(key, prompt, params)
    steps = []

    # when it decodes, each decode half-step counted
    while batch.busy:
        for _ in batch.joins():
            pass
        with count_host_reads() as reads:
            updates = batch.decode()
        stopped = sum(len(u.events) for u in updates.values())
        sampled = stopped - sum(u.summary is not None for u in updates.values())
        steps.append((len(reads), stopped, sampled))

    # then a step reads its stops; if tokens stopped, their records in one more read, and
    # each next token's draw (greedy: one argmax)
    assert any(stopped == 0 for _, stopped, _ in steps)
    assert any(stopped > 1 for _, stopped, _ in steps)
    for count, stopped, sampled in steps:
        assert count == 1 + (stopped > 0) + sampled
