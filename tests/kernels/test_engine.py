from dataclasses import dataclass
from typing import cast

import pytest
import torch

from kernels import attention
from kernels.checkpoint import load_checkpoint
from kernels.engine import Engine, TokenRecord
from kernels.rules import ACT, Convergence, ExitRule, Fixed, LoopSignals, Ponder, QExit
from kernels.runner import Trace
from kernels.scheduler import PrefillSchedule
from kernels.work import WorkCount
from tests.kernels.naive import naive_generate

FULL_DEPTH_POLICIES = ["best-available", "select", "recompute-kv"]  # q = 1 is the reference
POLICIES = [*FULL_DEPTH_POLICIES, "exit-kv", "first-loop-kv"]
RULES: list[ExitRule] = [QExit(0.5), QExit(0.8), Convergence(0.01), Fixed(2), Ponder(), ACT(0.05)]
ATOL = 1e-5


def greedy(engine, rows, new_tokens, work=None):
    """Prefill + decode; returns (prefill result, generated ids per row, records per row)."""
    prefill = engine.prefill(rows, reserve=new_tokens)
    records: list[list[TokenRecord]] = [[] for _ in prefill.lengths]
    for record in engine.decode(prefill, max_new_tokens=new_tokens, work=work):
        records[record.row].append(record)
    return prefill, [[r.token_id for r in rec] for rec in records], records


@pytest.fixture(scope="module")
def prompts(reference):
    ids = reference["input_ids"]
    return [ids[0, :10].tolist(), ids[1, :6].tolist(), ids[0, 3:16].tolist()]


# -- full depth equals the reference -----------------------------------------------------
@pytest.mark.parametrize("policy", FULL_DEPTH_POLICIES)
def test_q_one_reproduces_the_reference_full_depth(ouro_tiny, reference, policy):
    # when
    result = Engine(ouro_tiny.model, QExit(1.0), policy).prefill(reference["input_ids"])

    # then
    torch.testing.assert_close(result.logits, reference["logits_default"], atol=ATOL, rtol=0)
    torch.testing.assert_close(result.logits, reference["step_logits"][-1], atol=ATOL, rtol=0)
    assert (result.exit_loop == 4).all()


@pytest.mark.parametrize("policy", FULL_DEPTH_POLICIES)
def test_q_one_reproduces_the_reference_greedy_generation(ouro_tiny, reference, policy):
    engine = Engine(ouro_tiny.model, QExit(1.0), policy)
    prompt = reference["gen_prompt_ids"]

    _, generated, _ = greedy(engine, prompt, 8)

    assert torch.equal(torch.cat([prompt, torch.tensor(generated)], 1), reference["gen_output_ids"])


def test_select_reproduces_the_reference_threshold_outputs(ouro_tiny, reference):
    for i, q in enumerate(reference["thresholds"].tolist()):
        result = Engine(ouro_tiny.model, QExit(q), "select").prefill(reference["input_ids"])

        assert torch.equal(result.exit_loop - 1, reference["threshold_exit_steps"][i])
        torch.testing.assert_close(
            result.logits, reference["threshold_logits"][i], atol=ATOL, rtol=0
        )


@pytest.mark.parametrize("policy", ["best-available", "recompute-kv"])
def test_an_exiting_token_gets_the_logits_of_its_exit_loop(ouro_tiny, reference, policy):
    # given q = 0.5: tokens exit at loops 1-4; a token's own output depends only on its
    # prefix, which at position 0 is itself
    result = Engine(ouro_tiny.model, QExit(0.5), policy).prefill(reference["input_ids"])

    # then position 0 matches the reference at its exit loop
    for row in range(2):
        t = int(result.exit_loop[row, 0]) - 1
        torch.testing.assert_close(
            result.logits[row, 0], reference["step_logits"][t, row, 0], atol=ATOL, rtol=0
        )


@dataclass(frozen=True)
class AtLoop:
    """Each position exits at a loop chosen in advance: ``loops[position]``."""

    loops: tuple[int, ...]
    name = "at-loop"
    needs_logits = False

    def exits(self, signals: LoopSignals) -> torch.Tensor:
        return (signals.t >= torch.tensor(self.loops)[signals.position]) | signals.last


def test_the_reference_with_exits_is_best_available_prefill(ouro_tiny, reference):
    # given exits that mix every loop along the sequence (2 layers: each keeps its own K/V)
    ids = reference["input_ids"]  # (B, S)
    loops = tuple(1 + (5 * s) % 4 for s in range(ids.shape[1]))
    exits = torch.tensor(loops).expand_as(ids)

    # when the engine skips and the reference freezes the same positions
    rule = cast(ExitRule, AtLoop(loops))  # the engine reads a rule's name, needs_logits, exits
    result = Engine(ouro_tiny.model, rule, "best-available").prefill(ids)
    out = ouro_tiny.model(ids, exits=exits)

    # then every position's output agrees, and differs from never exiting
    assert torch.equal(result.exit_loop.long(), exits)
    torch.testing.assert_close(result.logits, out.step_logits[-1], atol=ATOL, rtol=0)
    assert not torch.allclose(out.step_logits[-1], reference["step_logits"][-1], atol=1e-3)


# -- skipping equals the slow per-token implementation -------------------------------------
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("rule", RULES, ids=repr)
def test_engine_matches_the_naive_per_token_implementation(ouro_tiny, prompts, policy, rule):
    # given
    prompt = prompts[0]

    # when
    prefill, generated, records = greedy(Engine(ouro_tiny.model, rule, policy), [prompt], 6)
    ids, naive = naive_generate(ouro_tiny.model, rule, policy, prompt, 6, n_loops=4)

    # then: same tokens, same exit loops, same logits at every position
    assert generated[0] == ids[len(prompt) :]
    exits = prefill.exit_loop[0].tolist() + [r.exit_loop for r in records[0]]
    assert exits == [t.exit_loop for t in naive]
    want = torch.stack([t.logits for t in naive[: len(prompt)]])
    torch.testing.assert_close(prefill.logits[0], want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("policy", POLICIES)
def test_sampled_halting_replays_its_seed_and_matches_the_naive_draws(ouro_tiny, prompts, policy):
    # given
    prompt = prompts[1]

    # when the same seed runs twice (once in a batch with another row), and another seed once
    engine = Engine(ouro_tiny.model, Ponder(), policy, seed=3)
    first, generated, records = greedy(engine, [prompt], 5)
    batched, _, _ = greedy(engine, [prompts[0], prompt], 5)
    other, _, _ = greedy(Engine(ouro_tiny.model, Ponder(), policy, seed=4), [prompt], 5)
    ids, naive = naive_generate(ouro_tiny.model, Ponder(), policy, prompt, 5, n_loops=4, seed=3)

    # then
    exits = first.exit_loop[0].tolist() + [r.exit_loop for r in records[0]]
    assert exits == [t.exit_loop for t in naive] and generated[0] == ids[len(prompt) :]
    assert batched.exit_loop[1, : len(prompt)].tolist() == first.exit_loop[0].tolist()
    assert other.exit_loop[0].tolist() != first.exit_loop[0].tolist()


def test_each_row_of_a_prefill_draws_with_its_own_seed(ouro_tiny, prompts):
    # given two requests' prompts prefilled together, each with its own seed
    def alone(seed):
        return Engine(ouro_tiny.model, Ponder(), seed=seed).prefill([prompts[0]]).exit_loop[0]

    engine = Engine(ouro_tiny.model, Ponder(), seed=9)

    # when
    together = engine.prefill_state([prompts[0], prompts[0]], seeds=[3, 4])
    length = together.ids.shape[1]
    schedule = PrefillSchedule(length, length, engine.n_loops)
    while (step := schedule.plan()) is not None:
        schedule.advance(step, engine.run_prefill_step(step, together))
    exits = together.result().exit_loop

    # then each row halts where its seed alone halts, and the seeds really differ
    assert exits[0].tolist() == alone(3).tolist()
    assert exits[1].tolist() == alone(4).tolist()
    assert exits[0].tolist() != exits[1].tolist()


def test_an_engine_draws_with_seed_zero_unless_given_one(ouro_tiny, prompts):
    def exits(**seed):
        return Engine(ouro_tiny.model, Ponder(), **seed).prefill([prompts[0]]).exit_loop

    assert torch.equal(exits(), exits(seed=0))
    assert not torch.equal(exits(), exits(seed=1))


def test_the_test_rules_really_spread_exits(ouro_tiny, prompts):
    for rule in [*RULES[:3], *RULES[4:]]:
        prefill = Engine(ouro_tiny.model, rule).prefill([prompts[0]])
        assert len(set(prefill.exit_loop[0].tolist())) > 1, rule


# -- batches -------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", POLICIES)
def test_a_ragged_batch_equals_each_row_alone(ouro_tiny, prompts, policy):
    engine = Engine(ouro_tiny.model, QExit(0.6), policy)

    # when: three rows of lengths 10, 6 and 13, decoded together (rows at different loops)
    batch, generated, records = greedy(engine, prompts, 7)

    # then
    for row, prompt in enumerate(prompts):
        alone, alone_generated, alone_records = greedy(engine, [prompt], 7)
        n = len(prompt)
        assert generated[row] == alone_generated[0]
        assert [r.exit_loop for r in records[row]] == [r.exit_loop for r in alone_records[0]]
        assert torch.equal(batch.exit_loop[row, :n], alone.exit_loop[0])
        torch.testing.assert_close(batch.logits[row, :n], alone.logits[0], atol=ATOL, rtol=0)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_on_either_side_gives_the_same_result(ouro_tiny, prompts, side):
    # given the prompts padded to one tensor with an attention mask
    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        cols = slice(width - len(prompt), width) if side == "left" else slice(0, len(prompt))
        ids[row, cols], mask[row, cols] = torch.tensor(prompt), 1
    engine = Engine(ouro_tiny.model, QExit(0.6))

    # when
    padded = engine.prefill(ids, mask)
    listed = engine.prefill(prompts)

    # then
    assert padded.lengths == [len(p) for p in prompts]
    assert torch.equal(padded.exit_loop, listed.exit_loop)
    torch.testing.assert_close(padded.logits, listed.logits, atol=0, rtol=0)


# -- exited tokens are never computed again ----------------------------------------------------
def count_layer_rows(model):
    """Count the token rows every layer call processes (an independent counter)."""
    counts = []

    def hook(module, args, output):
        x = args[0]
        counts.append(x.numel() // x.shape[-1])

    handles = [layer.register_forward_hook(hook) for layer in model.model.layers]
    return counts, handles


@pytest.mark.parametrize("policy", ["best-available", "recompute-kv"])
def test_exited_tokens_are_never_computed_again(ouro_tiny, prompts, policy):
    # given
    engine = Engine(ouro_tiny.model, QExit(0.5), policy)
    counts, handles = count_layer_rows(ouro_tiny.model)
    work = WorkCount()

    # when
    try:
        prefill, _, records = greedy(engine, prompts, 5, work=work)
    finally:
        for handle in handles:
            handle.remove()

    # then each token went through the layers exactly as many loops as it computed, and
    # that is its exit loop
    layers = len(ouro_tiny.model.model.layers)
    prompt_loops = int(prefill.loops_computed.sum())
    decode_loops = sum(r.loops_computed for rec in records for r in rec)
    assert sum(counts) == layers * (prompt_loops + decode_loops)
    assert torch.equal(prefill.loops_computed, prefill.exit_loop)
    assert all(r.loops_computed == r.exit_loop for rec in records for r in rec)
    assert prefill.work.token_layers_executed + work.token_layers_executed == sum(counts)
    assert prefill.work.token_loops_executed == prompt_loops
    assert prompt_loops < 4 * sum(prefill.lengths)


def test_select_computes_every_loop_and_reports_the_full_work(ouro_tiny, prompts):
    prefill = Engine(ouro_tiny.model, QExit(0.5), "select").prefill(prompts)

    assert (prefill.loops_computed[prefill.exit_loop > 0] == 4).all()
    assert prefill.work.executed_fraction == 1.0
    assert (prefill.exit_loop[prefill.exit_loop > 0] < 4).any()


def test_work_counts_match_the_flop_model(ouro_tiny, prompts):
    full = Engine(ouro_tiny.model, QExit(1.0)).prefill(prompts).work
    skipped = Engine(ouro_tiny.model, QExit(0.5)).prefill(prompts).work

    assert full.flops_executed == pytest.approx(full.flops_full)
    assert skipped.flops_full == pytest.approx(full.flops_full)
    assert skipped.flops_executed < 0.8 * full.flops_executed
    assert 0 < skipped.executed_fraction < 1


def test_traced_full_depth_baseline_includes_the_logit_lens(ouro_tiny, prompts):
    # given a logit lens at every computed loop (what the playground shows)
    full = Engine(ouro_tiny.model, QExit(1.0), top_k=3).prefill(prompts).work
    skipped = Engine(ouro_tiny.model, QExit(0.5), top_k=3).prefill(prompts).work

    # then full depth executes exactly its baseline, and skipping executes less
    assert full.flops_executed == pytest.approx(full.flops_full)
    assert skipped.flops_full == pytest.approx(full.flops_full)
    assert skipped.flops_executed < full.flops_executed


@pytest.mark.parametrize("policy", ["best-available", "recompute-kv"])
def test_prefill_work_counts_each_computed_loop_head_and_frozen_projection(
    ouro_tiny, prompts, policy
):
    # given exits at every loop, and no trace: one LM-head call per position, at its exit
    engine = Engine(ouro_tiny.model, QExit(0.5), policy)

    # when
    prefill = engine.prefill(prompts)

    # then every computed loop of a position counts its layers and the keys it saw (its
    # position + 1), and recompute-kv projects each layer's K/V of a state frozen early
    work, flops, loops = prefill.work, engine.flops, prefill.loops_computed
    keys = (torch.arange(loops.shape[1]) + 1) * loops
    n_real = sum(prefill.lengths)
    frozen = int(((prefill.exit_loop > 0) & (prefill.exit_loop < 4)).sum())
    assert frozen > 0 and work.head_tokens == n_real
    projections = flops.kv_projection * flops.layers * frozen if policy == "recompute-kv" else 0
    assert work.flops_executed == pytest.approx(
        flops.loops(int(loops.sum()), float(keys.sum())) + flops.head * n_real + projections,
        rel=1e-12,
    )


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("rule", [QExit(0.5), Convergence(0.01)], ids=repr)
@pytest.mark.parametrize("top_k", [0, 3])
def test_each_rows_prompt_work_adds_up_to_the_prefills(ouro_tiny, prompts, policy, rule, top_k):
    # given a prefill of three prompts (a continuous batch prefills requests together)
    engine = Engine(ouro_tiny.model, rule, policy, top_k=top_k)

    # when
    prefill = engine.prefill(prompts)
    rows = [engine.prompt_work(prefill, row) for row in range(len(prompts))]

    # then each row's counts are its own, and together they are what the prefill counted
    total = prefill.work
    for name in ("token_loops_executed", "token_loops_full", "token_layers_executed"):
        assert sum(getattr(w, name) for w in rows) == getattr(total, name), name
    assert sum(w.head_tokens for w in rows) == total.head_tokens
    for name in ("flops_executed", "flops_full"):
        assert sum(getattr(w, name) for w in rows) == pytest.approx(getattr(total, name)), name
    loops = prefill.loops_computed
    assert [w.token_loops_executed for w in rows] == [int(loops[r].sum()) for r in range(3)]
    # and a one-row prefill's work is its only row's
    alone = engine.prefill([prompts[1]])
    assert engine.prompt_work(alone, 0).token_loops_executed == alone.work.token_loops_executed
    assert engine.prompt_work(alone, 0).flops_executed == pytest.approx(alone.work.flops_executed)


@pytest.mark.parametrize("top_k", [0, 3])
def test_decode_work_counts_each_tokens_full_depth_baseline(ouro_tiny, prompts, top_k):
    # given two rows decoding, with and without a logit lens at every loop
    engine = Engine(ouro_tiny.model, QExit(0.5), top_k=top_k)
    work = WorkCount()

    # when
    _, _, records = greedy(engine, prompts[:2], 4, work=work)

    # then full depth would run all 4 loops of every token at its position, and the LM head
    # at every loop (traced) or once
    tokens = [r for rec in records for r in rec]
    flops, heads = engine.flops, 4 if top_k else 1
    assert work.token_loops_full == 4 * len(tokens) == 4 * 8
    assert work.flops_full == pytest.approx(
        sum(4 * flops.loops(1, r.position + 1) + heads * flops.head for r in tokens), rel=1e-12
    )
    # and each executed loop counts at its position, with one LM-head call per traced loop
    # or one per token (at its exit)
    assert work.token_loops_executed == sum(r.loops_computed for r in tokens) < 4 * len(tokens)
    assert work.head_tokens == sum(r.loops_computed if top_k else 1 for r in tokens)
    assert work.flops_executed == pytest.approx(
        sum(r.loops_computed * flops.loops(1, r.position + 1) for r in tokens)
        + work.head_tokens * flops.head,
        rel=1e-12,
    )


def test_a_prefill_holds_cache_slots_for_its_prompt_and_what_it_reserves(ouro_tiny, prompts):
    # given a joining request's prefill (a continuous batch loads it into a row of its own
    # cache, so it reserves nothing) and one decoded from its own cache
    engine = Engine(ouro_tiny.model)

    # when
    joining = engine.prefill_state([prompts[1], prompts[2]])
    decoding = engine.prefill_state([prompts[1], prompts[2]], reserve=3)

    # then
    assert joining.cache.capacity == len(prompts[2])
    assert decoding.cache.capacity == len(prompts[2]) + 3


def test_rows_without_a_token_or_a_mask_of_another_batch_are_refused(ouro_tiny, prompts):
    engine = Engine(ouro_tiny.model)
    ids = torch.tensor([prompts[1], prompts[1]])

    for rows in ([], [prompts[1], []]):
        with pytest.raises(ValueError) as error:
            engine.prefill(rows)
        assert str(error.value) == "every row needs at least one token"
    with pytest.raises(ValueError):
        engine.prefill(ids, torch.ones(1, ids.shape[1], dtype=torch.long))
    assert engine.prefill([prompts[1][:1], prompts[1]]).lengths == [1, len(prompts[1])]


def test_a_prefill_without_its_cache_cannot_be_decoded(ouro_tiny, prompts):
    engine = Engine(ouro_tiny.model)
    prefill = engine.prefill([prompts[1]], reserve=2, keep_cache=False)

    with pytest.raises(ValueError) as error:
        list(engine.decode(prefill, max_new_tokens=2))

    assert prefill.cache is None
    assert str(error.value) == "prefill was run with keep_cache=False; nothing to decode from"


# -- loops beyond training, trace ---------------------------------------------------------------
def test_more_loops_than_trained_extrapolate(ouro_tiny, prompts):
    engine = Engine(ouro_tiny.model, QExit(1.0), loops=6)

    result = engine.prefill([prompts[0]])

    assert (result.exit_loop[0] == 6).all()
    want = ouro_tiny.model(torch.tensor([prompts[0]]), loops=6).step_logits[-1, 0]
    torch.testing.assert_close(result.logits[0], want, atol=ATOL, rtol=0)


def test_trace_records_the_gate_and_a_logit_lens_per_computed_loop(ouro_tiny, reference):
    engine = Engine(ouro_tiny.model, QExit(0.8), top_k=3)

    records = list(engine.prompt_records(engine.prefill(reference["input_ids"][:1])))

    first = records[0]
    assert len(first.gate_lambda) == first.loops_computed == first.exit_loop
    torch.testing.assert_close(
        torch.tensor(first.gate_lambda), reference["gate_lambda"][: first.exit_loop, 0, 0]
    )
    assert first.cumulative[-1] >= 0.8 or first.exit_loop == 4
    ids, probs = zip(*first.top[0], strict=True)
    logits = reference["step_logits"][0, 0, 0]
    assert list(ids) == logits.topk(3).indices.tolist()
    torch.testing.assert_close(torch.tensor(probs), logits.softmax(-1).topk(3).values)


def test_a_trace_without_a_lens_records_each_computed_loop_and_no_trace_nothing(ouro_tiny, prompts):
    # given a convergence rule (a KL from loop 2 on), traced without a logit lens, and not
    traced = Engine(ouro_tiny.model, Convergence(0.01), trace=True)
    untraced = Engine(ouro_tiny.model, Convergence(0.01))

    # when
    _, _, records = greedy(traced, [prompts[1]], 4)
    prefill, _, plain = greedy(untraced, [prompts[1]], 4)

    # then each traced token has its loops' numbers, no KL at loop 1 and no lens
    assert any(r.loops_computed >= 2 for r in records[0])
    for record in records[0]:
        n = record.loops_computed
        assert len(record.gate_lambda) == len(record.exit_p) == len(record.cumulative) == n
        assert record.kl[0] is None and all(isinstance(kl, float) for kl in record.kl[1:])
        assert record.top == [[]] * n
    # and an untraced token has none of them
    assert [(r.token_id, r.exit_loop) for r in plain[0]] == [
        (r.token_id, r.exit_loop) for r in records[0]
    ]
    assert all(r.gate_lambda == r.kl == r.top == [] for r in plain[0])
    assert prefill.trace is None
    assert all(r.gate_lambda == r.top == [] for r in untraced.prompt_records(prefill))


def test_a_trace_reads_as_not_computed_beyond_each_positions_loops(ouro_tiny, prompts):
    # given a traced prefill whose positions exit at different loops, and pads
    prefill = Engine(ouro_tiny.model, QExit(0.5), top_k=2).prefill(prompts)
    trace = prefill.trace
    assert trace is not None

    # then loop numbers are integers (indices), and a (loop, position) not computed holds
    # NaN, id -1 and probability 0
    assert prefill.exit_loop.dtype == prefill.loops_computed.dtype == torch.long
    computed = torch.arange(4)[:, None] < prefill.loops_computed.flatten()[None, :]  # (T, B*S)
    assert not computed.all()
    for values in (trace.gate_lambda, trace.exit_p, trace.cumulative, trace.kl):
        assert values[~computed].isnan().all()
    assert (trace.top_ids[~computed] == -1).all() and (trace.top_probs[~computed] == 0).all()
    assert (trace.top_ids[computed] >= 0).all() and not trace.cumulative[computed].isnan().any()


@pytest.mark.parametrize("loops", [4, 6])
def test_each_tokens_stopping_distribution_ends_at_its_last_loop(ouro_tiny, prompts, loops):
    # given full depth at the trained loop count and beyond it
    engine = Engine(ouro_tiny.model, QExit(1.0), loops=loops, trace=True)

    # when
    prefill = engine.prefill([prompts[0]])

    # then the last loop takes all the mass left: every position's exit probabilities sum
    # to 1, and the cumulative reaches 1 there only
    trace = prefill.trace
    assert trace is not None
    ones = torch.ones(len(prompts[0]))
    torch.testing.assert_close(trace.exit_p.sum(0), ones)
    torch.testing.assert_close(trace.cumulative[-1], ones)
    assert (trace.cumulative[:-1] < 1 - 1e-3).all()


def test_reset_trace_slots_read_as_never_computed_and_the_others_keep_theirs():
    # given a trace of 3 loops x 3 slots, every entry written
    trace = Trace.empty(3, 3, 2, torch.device("cpu"))
    for values in (trace.gate_lambda, trace.exit_p, trace.cumulative, trace.kl):
        values.fill_(0.5)
    trace.top_ids.fill_(7)
    trace.top_probs.fill_(0.25)

    # when slots 0 and 2 start new tokens together
    trace.reset(torch.tensor([0, 2]))

    # then
    for values in (trace.gate_lambda, trace.exit_p, trace.cumulative, trace.kl):
        assert values[:, [0, 2]].isnan().all() and (values[:, 1] == 0.5).all()
    assert (trace.top_ids[:, [0, 2]] == -1).all() and (trace.top_ids[:, 1] == 7).all()
    assert (trace.top_probs[:, [0, 2]] == 0).all() and (trace.top_probs[:, 1] == 0.25).all()


def test_trace_records_read_each_slot_to_its_own_depth():
    # given a trace of 3 loops x 3 slots where entry (t, s) holds 10 t + s, KL unknown at
    # loop 1, and a lens of width 2
    trace = Trace.empty(3, 3, 2, torch.device("cpu"))
    values = 10 * torch.arange(3.0)[:, None] + torch.arange(3.0)[None, :]  # (T, N)
    for field in (trace.gate_lambda, trace.exit_p, trace.cumulative, trace.kl):
        field.copy_(values)
    trace.kl[0] = float("nan")
    trace.top_ids.copy_(values.long()[..., None].expand(3, 3, 2))
    trace.top_probs.fill_(0.5)

    # when slot 2 is read to loop 3 and slot 0 to loop 1, together
    deep, shallow = trace.records([2, 0], [3, 1], top_k=2)

    # then each holds its own slot's loops, no more
    assert deep["gate_lambda"] == deep["exit_p"] == deep["cumulative"] == [2.0, 12.0, 22.0]
    assert deep["kl"] == [None, 12.0, 22.0]
    assert deep["top"] == [[(2, 0.5), (2, 0.5)], [(12, 0.5), (12, 0.5)], [(22, 0.5), (22, 0.5)]]
    assert shallow["gate_lambda"] == [0.0] and shallow["kl"] == [None]
    assert shallow["top"] == [[(0, 0.5), (0, 0.5)]]
    # and without a lens, every loop's top list is empty
    assert trace.records([1], [2], top_k=0)[0]["top"] == [[], []]


@pytest.mark.parametrize("policy", ["best-available", "recompute-kv"])
def test_prefill_query_tiles_give_the_same_result(ouro_tiny, prompts, policy, monkeypatch):
    # given tiles of 4 positions instead of one tile for these short prompts
    engine = Engine(ouro_tiny.model, QExit(0.6), policy)
    one_tile = engine.prefill(prompts)
    monkeypatch.setattr(attention, "TILE_MIN", 4)

    # when
    tiled = engine.prefill(prompts)

    # then
    assert torch.equal(tiled.exit_loop, one_tile.exit_loop)
    torch.testing.assert_close(tiled.logits, one_tile.logits, atol=ATOL, rtol=0)
    _, naive = naive_generate(ouro_tiny.model, QExit(0.6), policy, prompts[2], 0, n_loops=4)
    torch.testing.assert_close(
        tiled.logits[2, : len(prompts[2])],
        torch.stack([t.logits for t in naive]),
        atol=ATOL,
        rtol=0,
    )


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("rule", [QExit(0.6), Ponder()], ids=repr)
@pytest.mark.parametrize("chunk", [1, 4, 100])
def test_a_chunked_prefill_equals_the_unchunked_one(ouro_tiny, prompts, policy, rule, chunk):
    # given a ragged batch (13, 6 and 10 positions) prefilled whole, then `chunk` positions
    # per step (1: every position on its own, as a decode step would run it; 100: one chunk)
    engine = Engine(ouro_tiny.model, rule, policy, top_k=3, seed=2)
    rows = [prompts[2], prompts[1], prompts[0]]
    whole = engine.prefill(rows, reserve=4)

    # when
    chunked = engine.prefill(rows, reserve=4, chunk=chunk)

    # then every position exits at the same loop with the same logits and trace
    assert torch.equal(chunked.exit_loop, whole.exit_loop)
    assert torch.equal(chunked.loops_computed, whole.loops_computed)
    torch.testing.assert_close(chunked.logits, whole.logits, atol=ATOL, rtol=0)
    assert chunked.trace is not None and whole.trace is not None
    torch.testing.assert_close(
        chunked.trace.cumulative, whole.trace.cumulative, atol=ATOL, rtol=0, equal_nan=True
    )
    assert chunked.work.token_loops_executed == whole.work.token_loops_executed
    # and the cache decodes on exactly as the unchunked one does
    cache, want = chunked.kept_cache(), whole.kept_cache()
    assert cache.e_len == want.e_len and cache.entries() == want.entries()
    assert torch.equal(cache.exit_loop, want.exit_loop)
    decoded = [(r.token_id, r.exit_loop) for r in engine.decode(chunked, max_new_tokens=4)]
    assert decoded == [(r.token_id, r.exit_loop) for r in engine.decode(whole, max_new_tokens=4)]


def test_a_chunked_prefill_matches_the_naive_per_token_implementation(ouro_tiny, prompts):
    # given
    prompt = prompts[2]

    # when
    prefill = Engine(ouro_tiny.model, QExit(0.6), "recompute-kv").prefill([prompt], chunk=4)
    _, naive = naive_generate(ouro_tiny.model, QExit(0.6), "recompute-kv", prompt, 0, n_loops=4)

    # then
    assert prefill.exit_loop[0].tolist() == [t.exit_loop for t in naive]
    want = torch.stack([t.logits for t in naive])
    torch.testing.assert_close(prefill.logits[0], want, atol=ATOL, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("policy", POLICIES)
def test_cuda_matches_cpu(ouro_tiny, prompts, policy):
    from kernels.checkpoint import load_checkpoint

    on_gpu = load_checkpoint(ouro_tiny.path, device="cuda")
    cpu = greedy(Engine(ouro_tiny.model, QExit(0.6), policy), prompts, 5)
    gpu = greedy(Engine(on_gpu.model, QExit(0.6), policy), prompts, 5)

    assert gpu[1] == cpu[1]
    assert torch.equal(gpu[0].exit_loop.cpu(), cpu[0].exit_loop)
    torch.testing.assert_close(gpu[0].logits.cpu(), cpu[0].logits, atol=1e-4, rtol=0)


def test_the_non_cpu_attention_path_matches_the_fused_one(ouro_tiny, prompts, monkeypatch):
    # given the explicit log-sum-exp attention other devices use, forced on CPU
    engine = Engine(ouro_tiny.model, QExit(0.6))
    fused = greedy(engine, prompts, 5)
    monkeypatch.setattr(attention, "_use_fused_cpu", lambda q: False)

    # when
    explicit_run = greedy(engine, prompts, 5)

    # then
    assert explicit_run[1] == fused[1]
    torch.testing.assert_close(explicit_run[0].logits, fused[0].logits, atol=1e-5, rtol=0)


def test_a_chunked_prefill_on_the_non_cpu_attention_path_equals_the_whole_one(
    ouro_tiny, prompts, monkeypatch
):
    # given three rows prefilled whole on the fused path
    engine = Engine(ouro_tiny.model, QExit(0.6))
    rows = [prompts[2], prompts[1], prompts[0]]
    whole = engine.prefill(rows)
    monkeypatch.setattr(attention, "_use_fused_cpu", lambda q: False)

    # when they are prefilled 4 positions a step on the explicit path other devices use
    chunked = engine.prefill(rows, chunk=4)

    # then
    assert torch.equal(chunked.exit_loop, whole.exit_loop)
    torch.testing.assert_close(chunked.logits, whole.logits, atol=ATOL, rtol=0)


def test_a_bfloat16_model_prefills_in_chunks_and_decodes_as_it_does_whole(fixture_dir, prompts):
    # given the checkpoint in bfloat16, two rows prefilled whole and 4 positions a step
    engine = Engine(load_checkpoint(fixture_dir, device="cpu", dtype=torch.bfloat16).model)
    rows = [prompts[2], prompts[1]]
    whole = engine.prefill(rows, reserve=4)

    # when
    chunked = engine.prefill(rows, reserve=4, chunk=4)

    # then both give bfloat16 logits that agree to bfloat16's precision, and decode alike
    assert chunked.logits.dtype == whole.logits.dtype == torch.bfloat16
    torch.testing.assert_close(chunked.logits, whole.logits, atol=0.05, rtol=0)
    decoded = [(r.token_id, r.exit_loop) for r in engine.decode(chunked, max_new_tokens=4)]
    assert decoded == [(r.token_id, r.exit_loop) for r in engine.decode(whole, max_new_tokens=4)]
