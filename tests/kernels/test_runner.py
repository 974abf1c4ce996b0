"""One step runner for every request: rows of different settings share its steps, and
each row computes what it computes alone."""

from dataclasses import replace

import pytest
import torch

from kernels.engine import Engine
from kernels.rules import ACT, Convergence, Fixed, Ponder, QExit, kv_policy
from kernels.runner import StepRunner
from kernels.scheduler import PrefillSchedule, RowSettings, Scheduler

PROMPTS = ["def loop(x):", "import os, sys", "class A(B):", "for i in range(3):", "x = 1"]
# five exit rules, three KV policies, four loop caps, four lens widths, two seeds
SETTINGS = [
    RowSettings(QExit(0.6), kv_policy("best-available"), 4, 5, lens=3),
    RowSettings(Convergence(1e-2), kv_policy("select"), 3, 4, lens=0),
    RowSettings(Fixed(2), kv_policy("recompute-kv"), 5, 6, lens=5),
    RowSettings(Ponder(), kv_policy("best-available"), 4, 5, seed=3, lens=1),
    RowSettings(ACT(0.3), kv_policy("recompute-kv"), 6, 3, seed=1, lens=2),
]


def run(runner, prompts, settings, chunk):
    """Prefill ``prompts`` (row i with ``settings[i]``) in one state, then decode greedily
    in one batch; per row: its prompt's (exit loops, logits, lens ids) and its generated
    (tokens, exit loops, logits)."""
    prefilling = runner.prefill_state(
        prompts, reserve=max(s.max_new_tokens for s in settings), settings=settings
    )
    length = prefilling.ids.shape[1]
    schedule = PrefillSchedule(length, chunk or length, prefilling.rows.deepest)
    while (step := schedule.plan()) is not None:
        schedule.advance(step, runner.run_prefill_step(step, prefilling))
    prefill = prefilling.result()
    rows = []
    for r, prompt in enumerate(prompts):
        n, lens = len(prompt), settings[r].lens
        ids = prefill.trace.top_ids[:, r * length : r * length + n, :lens]
        rows.append((prefill.exit_loop[r, :n], prefill.logits[r, :n], ids))
    cache = prefill.kept_cache()
    decoding = runner.decode_state(cache, kl=True)
    scheduler = Scheduler(len(prompts))
    first = [int(prefill.logits[r, len(p) - 1].argmax()) for r, p in enumerate(prompts)]
    for r, token in enumerate(first):
        scheduler.start(r, r, settings[r], token, cache.e_len[r])
    runner.start_tokens(decoding, list(range(len(prompts))), first, settings)
    generated: list[list[tuple[int, int, torch.Tensor]]] = [[] for _ in prompts]
    while (plan := scheduler.plan()) is not None:
        stops = runner.run_step(plan, decoding)
        starts = []
        for done in scheduler.advance(plan, stops):
            logits = decoding.state.out_logits[done.row].clone()
            exit_loop = int(decoding.state.reported[done.row])
            generated[done.row].append((done.token, exit_loop, logits))
            if not done.finished:
                token = int(logits.argmax())
                scheduler.next_token(done.row, token)
                starts.append((done.row, token, settings[done.row]))
        if starts:
            runner.start_tokens(decoding, *map(list, zip(*starts, strict=True)))
    return rows, generated


def assert_rows_equal(got, want):
    """Same exits, lens ids and tokens; logits within 1e-5 (fp32)."""
    (exits, logits, ids), generated = got
    (want_exits, want_logits, want_ids), want_generated = want
    assert torch.equal(exits, want_exits)
    torch.testing.assert_close(logits, want_logits, atol=1e-5, rtol=0)
    assert torch.equal(ids, want_ids)
    assert [(t, e) for t, e, _ in generated] == [(t, e) for t, e, _ in want_generated]
    for (_, _, mine), (_, _, theirs) in zip(generated, want_generated, strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("chunk", [None, 3])
def test_rows_of_any_settings_in_one_step_equal_each_row_alone(ouro_tiny, chunk):
    # given one runner, and five requests on five exit rules, three KV policies, four
    # loop caps and four lens widths
    prompts = [list(ouro_tiny.tokenizer.encode(p)) for p in PROMPTS]
    runner = StepRunner(ouro_tiny.model, loops=6, top_k=5, trace=True)

    # when they are prefilled in one state and decoded in one batch, and each alone
    prompt_rows, generated = run(runner, prompts, SETTINGS, chunk)
    alone = [run(runner, [p], [s], chunk) for p, s in zip(prompts, SETTINGS, strict=True)]

    # then each row computed what it computes alone
    for r, (rows, gen) in enumerate(alone):
        assert_rows_equal((prompt_rows[r], generated[r]), (rows[0], gen[0]))
    # and what the engine of its own settings computes alone
    for r, (prompt, s) in enumerate(zip(prompts, SETTINGS, strict=True)):
        engine = Engine(
            ouro_tiny.model, s.rule, s.policy.name, loops=s.n_loops, top_k=s.lens, seed=s.seed
        )
        prefill = engine.prefill([prompt], reserve=s.max_new_tokens, chunk=chunk)
        assert torch.equal(prefill.exit_loop[0], prompt_rows[r][0])
        torch.testing.assert_close(prefill.logits[0], prompt_rows[r][1], atol=1e-5, rtol=0)
        records = list(engine.decode(prefill, max_new_tokens=s.max_new_tokens))
        assert [(x.token_id, x.exit_loop) for x in records] == [(t, e) for t, e, _ in generated[r]]
    # and the settings really spread the exits
    exits = torch.cat([e for e, _, _ in prompt_rows]).tolist()
    exits += [e for gen in generated for _, e, _ in gen]
    assert len(set(exits)) >= 4


def test_a_steps_lens_is_the_widest_its_rows_asked_for(ouro_tiny):
    # given a runner whose traces hold a 20-wide lens, and rows asking for 2 and 3
    prompts = [list(ouro_tiny.tokenizer.encode(p)) for p in PROMPTS[:2]]
    runner = StepRunner(ouro_tiny.model, loops=4, top_k=20, trace=True)
    settings = [replace(SETTINGS[0], lens=2), replace(SETTINGS[0], lens=3)]

    # when they are prefilled and decoded together
    prefilling = runner.prefill_state(prompts, reserve=5, settings=settings)
    n = prefilling.ids.shape[1]
    schedule = PrefillSchedule(n, n, 4)
    while (step := schedule.plan()) is not None:
        schedule.advance(step, runner.run_prefill_step(step, prefilling))
    decoding = runner.decode_state(prefilling.cache, kl=False)
    scheduler = Scheduler(2)
    for r in range(2):
        scheduler.start(r, r, settings[r], 1, prefilling.cache.e_len[r])
    runner.start_tokens(decoding, [0, 1], [1, 1], settings)
    plan = scheduler.plan()
    assert plan is not None
    runner.run_step(plan, decoding)

    # then every computed loop has a 3-wide lens, and nothing wider was computed
    for trace in (prefilling.trace, decoding.trace):
        assert trace is not None
        computed = trace.top_ids[:, :, 0] >= 0
        assert computed.any()
        assert (trace.top_ids[computed][:, :3] >= 0).all()
        assert (trace.top_ids[..., 3:] == -1).all()


def test_the_packed_attention_step_equals_the_per_row_one(ouro_tiny):
    # given rows of five rules, three policies and four caps, decoded with each row's
    # attention a call of its own (the CPU's choice), and packed into one call a step
    prompts = [list(ouro_tiny.tokenizer.encode(p)) for p in PROMPTS]
    per_row = StepRunner(ouro_tiny.model, loops=6, top_k=5, trace=True)
    packed = StepRunner(ouro_tiny.model, loops=6, top_k=5, trace=True)
    per_row.packed_attention, packed.packed_attention = False, True

    # when
    want = run(per_row, prompts, SETTINGS, 3)
    got = run(packed, prompts, SETTINGS, 3)

    # then every row computed the same (logits within 1e-5)
    for r in range(len(prompts)):
        assert_rows_equal((got[0][r], got[1][r]), (want[0][r], want[1][r]))


# the one-plane policies beside the others: exit-kv prefills one position per chunk
ONE_PLANE = [
    RowSettings(QExit(0.6), kv_policy("exit-kv"), 4, 5, lens=3),
    RowSettings(Ponder(), kv_policy("first-loop-kv"), 5, 4, seed=2, lens=1),
    RowSettings(Fixed(2), kv_policy("best-available"), 3, 4, lens=0),
    RowSettings(ACT(0.3), kv_policy("first-loop-kv"), 6, 3, lens=2),
    RowSettings(Convergence(1e-2), kv_policy("exit-kv"), 4, 5, lens=5),
]


@pytest.mark.parametrize("packed", [False, True])
def test_one_plane_policies_share_steps_with_the_others_and_equal_each_row_alone(ouro_tiny, packed):
    # given one runner (its decode attention per row, or packed in one call a step) and
    # rows of exit-kv and first-loop-kv beside best-available, at different loops and caps
    prompts = [list(ouro_tiny.tokenizer.encode(p)) for p in PROMPTS]
    runner = StepRunner(ouro_tiny.model, loops=6, top_k=5, trace=True)
    runner.packed_attention = packed

    # when prefilled in one state and decoded in one batch, and each row alone
    prompt_rows, generated = run(runner, prompts, ONE_PLANE, 1)
    alone = [run(runner, [p], [s], 1) for p, s in zip(prompts, ONE_PLANE, strict=True)]

    # then each row computed what it computes alone, and what its own engine computes
    for r, (rows, gen) in enumerate(alone):
        assert_rows_equal((prompt_rows[r], generated[r]), (rows[0], gen[0]))
    for r, (prompt, s) in enumerate(zip(prompts, ONE_PLANE, strict=True)):
        engine = Engine(
            ouro_tiny.model, s.rule, s.policy.name, loops=s.n_loops, top_k=s.lens, seed=s.seed
        )
        prefill = engine.prefill([prompt], reserve=s.max_new_tokens, chunk=1)
        assert torch.equal(prefill.exit_loop[0], prompt_rows[r][0])
        records = list(engine.decode(prefill, max_new_tokens=s.max_new_tokens))
        assert [(x.token_id, x.exit_loop) for x in records] == [(t, e) for t, e, _ in generated[r]]
