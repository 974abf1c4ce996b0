"""A run in a continuous batch gives what it gives alone (kernels.generate.generate_stream)."""

from collections.abc import Hashable
from typing import Any

import pytest

from kernels.batch import PREFILL_CHUNK, ContinuousBatch, RunUpdate
from kernels.generate import generate_stream
from kernels.request import GenerationParams

# Prompts and settings checked (by ``assert_no_near_tie``) to keep every q-exit token's
# cumulative exit probability and every convergence KL at least 1e-4 from its threshold,
# so the different rounding of batched matrix products cannot flip an exit.
REQUESTS = {
    "greedy": ("def loop(x):", GenerationParams(max_new_tokens=6, q=0.6)),
    "sampled": (
        "import os",
        GenerationParams(max_new_tokens=8, q=0.8, temperature=0.9, top_p=0.9, seed=3),
    ),
    "fixed": ("class A:", GenerationParams(max_new_tokens=4, exit_rule="fixed", fixed_loops=2)),
    "converge": (
        "x = 1",
        GenerationParams(max_new_tokens=5, exit_rule="convergence", kl_threshold=1e-2),
    ),
    "recompute": (
        "for i in",
        GenerationParams(max_new_tokens=7, q=0.5, kv_policy="recompute-kv", loops=5),
    ),
    "select": ("return", GenerationParams(max_new_tokens=3, q=0.5, kv_policy="select", top_k=2)),
    "exit-kv": ("while x:", GenerationParams(max_new_tokens=5, q=0.6, kv_policy="exit-kv")),
    "first-loop": (
        "print(",
        GenerationParams(max_new_tokens=5, q=0.6, kv_policy="first-loop-kv", top_k=2),
    ),
}
MARGIN = 1e-4


def alone(loaded, key, requests=REQUESTS):
    prompt, params = requests[key]
    stream = generate_stream(loaded, prompt, params)
    return [e.to_dict() for e in stream], stream.summary


def assert_no_near_tie(events, params):
    for event in events:
        for loop in event["loops"]:
            if params.exit_rule == "q-exit" and params.q < 1:
                assert abs(loop["cumulative"] - params.q) > MARGIN
            if params.exit_rule == "convergence" and loop["kl"] is not None:
                assert abs(loop["kl"] - params.kl_threshold) > MARGIN


def assert_same_run(batched, reference):
    """Same positions, tokens, texts and exits; per-loop numbers within 1e-5."""
    assert len(batched) == len(reference)
    for got, want in zip(batched, reference, strict=True):
        for name in ("position", "phase", "token_id", "text", "exit_loop", "loops_computed"):
            assert got[name] == want[name], (name, got["position"])
        for mine, theirs in zip(got["loops"], want["loops"], strict=True):
            for name in ("gate_lambda", "exit_p", "cumulative"):
                assert mine[name] == pytest.approx(theirs[name], abs=1e-5)
            assert (mine["kl"] is None) == (theirs["kl"] is None)
            if mine["kl"] is not None:
                assert mine["kl"] == pytest.approx(theirs["kl"], abs=1e-5)
            assert [t[:2] for t in mine["top"]] == [t[:2] for t in theirs["top"]]
            assert [t[2] for t in mine["top"]] == pytest.approx(
                [t[2] for t in theirs["top"]], abs=1e-5
            )
        assert got["work"]["token_loops_executed"] == want["work"]["token_loops_executed"]


def drive(batch, joins, cancels=None):
    """Step ``batch`` until idle; ``joins``/``cancels``: {step: [keys]} added/cancelled
    before that step. Returns each run's events and summary, and the steps taken."""
    events: dict[Hashable, list[dict[str, Any]]] = {}
    summaries: dict[Hashable, dict[str, Any]] = {}
    n = 0
    cancels = cancels or {}
    while batch.busy or any(s >= n for s in joins):
        for key in joins.get(n, []):
            batch.add(key, *REQUESTS[key])
        for key in cancels.get(n, []):
            batch.cancel(key)
        for key, update in batch.step().items():
            events.setdefault(key, []).extend(e.to_dict() for e in update.events)
            if update.summary is not None:
                summaries[key] = update.summary
        n += 1
    return events, summaries, n


@pytest.fixture(scope="module")
def reference(ouro_tiny):
    """Every request run alone (its prompt prefilled whole)."""
    runs = {key: alone(ouro_tiny, key) for key in REQUESTS}
    for key, (events, _) in runs.items():
        assert_no_near_tie(events, REQUESTS[key][1])
    return runs


@pytest.mark.parametrize("chunk", [2, PREFILL_CHUNK])
def test_batched_runs_equal_the_same_runs_alone(ouro_tiny, reference, chunk):
    # given eight requests on different rules, policies, loop caps, samplers and budgets,
    # three rows, and requests joining mid-batch (some wait for a row to free up), their
    # prompts prefilled `chunk` positions per step (2: every prompt in several chunks)
    batch = ContinuousBatch(ouro_tiny, max_rows=3, prefill_chunk=chunk)

    # when
    events, summaries, steps = drive(
        batch,
        {
            0: ["greedy", "sampled"],
            3: ["fixed", "converge"],
            7: ["recompute", "select"],
            9: ["exit-kv", "first-loop"],
        },
    )

    # then every run streamed what it streams alone, and left with the same summary
    assert set(events) == set(REQUESTS)
    for key, (want_events, want_summary) in reference.items():
        assert_same_run(events[key], want_events)
        for name in ("generated_tokens", "stopped", "token_loops_executed", "token_loops_full"):
            assert summaries[key][name] == want_summary[name], (key, name)
        assert summaries[key]["exit_rule"] == want_summary["exit_rule"]
        assert summaries[key]["kv_policy"] == want_summary["kv_policy"]
    # and the runs really shared steps: far fewer than their prefill steps (each chunk runs
    # as deep as its deepest position) and generated tokens' loops, one after another
    alone_steps = sum(
        max(e["loops_computed"] for e in run[start : start + chunk])
        for run in events.values()
        for start in range(0, sum(e["phase"] == "prompt" for e in run), chunk)
    ) + sum(
        e["loops_computed"] for run in events.values() for e in run if e["phase"] == "generated"
    )
    assert steps < 0.6 * alone_steps
    assert not batch.busy and batch.scheduler.rows == [None, None, None]


def test_cancelling_one_run_leaves_the_others_unchanged(ouro_tiny, reference):
    batch = ContinuousBatch(ouro_tiny, max_rows=4)

    events, summaries, _ = drive(batch, {0: ["greedy", "sampled", "recompute"]}, {14: ["sampled"]})

    assert summaries["sampled"]["stopped"] == "stopped"
    cut = events["sampled"]
    assert 0 < summaries["sampled"]["generated_tokens"] < 8
    assert_same_run(cut, reference["sampled"][0][: len(cut)])
    for key in ("greedy", "recompute"):
        assert_same_run(events[key], reference[key][0])
        assert summaries[key]["stopped"] == reference[key][1]["stopped"]


def test_a_joining_prompt_adds_at_most_one_chunk_of_work_to_each_step(ouro_tiny, reference):
    # given a run decoding, and a run with a longer prompt joining with chunks of 2
    batch = ContinuousBatch(ouro_tiny, max_rows=2, prefill_chunk=2)
    batch.add("recompute", *REQUESTS["recompute"])
    while not any(
        e.phase == "generated" for e in batch.step().get("recompute", RunUpdate()).events
    ):
        pass
    batch.add("sampled", *REQUESTS["sampled"])
    prompt_tokens = reference["sampled"][1]["prompt_tokens"]
    assert prompt_tokens > 2

    # when the batch steps until the joining run's prompt is through
    run, executed = batch.runs["sampled"], 0
    per_step, decoded_meanwhile = [], 0
    while not run.joined:
        updates = batch.step()
        if run.prefilling is not None:
            work = run.prefilling.work
        else:  # joined: its prefill's work went to its report
            assert run.report is not None
            work = run.report.prompt_work
        per_step.append(work.token_loops_executed - executed)
        executed = work.token_loops_executed
        decoded_meanwhile += len(updates.get("recompute", RunUpdate()).events)

    # then the prefill took a step per chunk-loop, at most 2 position-loops each, while the
    # decoding run went on generating
    assert max(per_step) <= 2
    assert len(per_step) >= -(-prompt_tokens // 2)
    assert sum(per_step) == reference["sampled"][1]["token_loops_executed"] - sum(
        e["loops_computed"] for e in reference["sampled"][0] if e["phase"] == "generated"
    )
    assert decoded_meanwhile > 0


def test_a_short_prompt_runs_all_its_loops_in_one_step_within_the_chunk(ouro_tiny, reference):
    # given a budget of 64 position-loops a step, more than this prompt's positions x loops
    batch = ContinuousBatch(ouro_tiny, max_rows=1, prefill_chunk=64)
    batch.add("greedy", *REQUESTS["greedy"])
    prompt_tokens = reference["greedy"][1]["prompt_tokens"]
    assert prompt_tokens * ouro_tiny.config.total_ut_steps <= 64  # its loop cap

    # when
    update = batch.step()["greedy"]

    # then its whole prefill was done in that step, and it joined its row
    assert sum(e.phase == "prompt" for e in update.events) == prompt_tokens
    assert batch.scheduler.rows[0] is not None


def test_requests_arriving_together_each_add_one_chunk_a_step_and_join_together(
    ouro_tiny, reference
):
    # given a run decoding, a free row for each of three more, and a budget of one loop of
    # the longest of their prompts a step for each joining request
    keys = ["greedy", "fixed", "converge"]
    loops = {key: reference[key][1]["prompt_tokens"] for key in keys}
    chunk = max(loops.values())
    batch = ContinuousBatch(ouro_tiny, max_rows=4, prefill_chunk=chunk)
    batch.add("recompute", *REQUESTS["recompute"])
    while not batch.runs["recompute"].joined:
        batch.step()
    for key in keys:
        batch.add(key, *REQUESTS[key])

    def prefilled(key: str) -> int:
        run = batch.runs[key]
        if run.joined:  # its prefill's work went to its report
            assert run.report is not None
            return run.report.prompt_work.token_loops_executed
        return run.prefilling.work.token_loops_executed if run.prefilling is not None else 0

    # when the batch steps until all three have joined
    executed, steps = 0, 0
    while not all(batch.runs[key].joined for key in keys):
        batch.step()
        steps += 1
        work = sum(prefilled(key) for key in keys)
        # then no step did more than a chunk of prefill for each of the three
        assert work - executed <= 3 * chunk
        executed = work

    # and they joined together, in the steps one of them alone would take: a loop a step
    assert steps <= ouro_tiny.config.total_ut_steps


def test_bad_requests_are_refused_and_queue_nothing(ouro_tiny):
    batch = ContinuousBatch(ouro_tiny, max_rows=2, max_loops=4)

    with pytest.raises(ValueError, match="at most 4"):
        batch.add("deep", "x", GenerationParams(loops=6))
    with pytest.raises(ValueError, match="q must lie"):
        batch.add("bad", "x", GenerationParams(q=2.0))
    batch.add("ok", "x", GenerationParams(max_new_tokens=1))
    with pytest.raises(ValueError, match="already"):
        batch.add("ok", "x", GenerationParams())
    with pytest.raises(ValueError, match="prefill_chunk"):
        ContinuousBatch(ouro_tiny, max_rows=2, prefill_chunk=0)

    assert list(batch.runs) == ["ok"]


@pytest.mark.parametrize("lockstep", ["dense", "compact"])
def test_lockstep_changes_no_run_and_dense_lockstep_computes_every_held_row(
    ouro_tiny, reference, lockstep
):
    # given four runs on different rules and KV policies, in a lockstep batch (each token
    # waits for the deepest row of its wave)
    keys = ["greedy", "sampled", "fixed", "recompute"]
    _, _, piped_steps = drive(ContinuousBatch(ouro_tiny, max_rows=4), {0: keys})
    batch = ContinuousBatch(ouro_tiny, max_rows=4, lockstep=lockstep)
    for key in keys:
        batch.add(key, *REQUESTS[key])
    computed: list[int] = []  # rows through the shared layers in a loop call
    headed: list[int] = []  # rows through the LM head (gate and lens follow it)
    hooks = [
        module.register_forward_hook(
            lambda _module, args, _out, calls=calls: calls.append(len(args[0]))
        )
        for module, calls in (
            (batch.engine.body.norm, computed),
            (batch.engine.model.lm_head, headed),
        )
    ]
    events: dict[Hashable, list[dict[str, Any]]] = {key: [] for key in keys}
    steps: list[tuple[int, list[int], list[int]]] = []  # (held, computed, headed) per decode

    # when it steps until every run has left
    try:
        while batch.busy:
            for part in batch.joins():
                for run, update in part.items():
                    events[run].extend(e.to_dict() for e in update.events)
            held = sum(row is not None for row in batch.scheduler.rows)
            computed.clear()
            headed.clear()
            for run, update in batch.decode().items():
                events[run].extend(e.to_dict() for e in update.events)
            if held:
                steps.append((held, list(computed), list(headed)))
    finally:
        for hook in hooks:
            hook.remove()

    # then every run is what it is alone, and waiting for the deepest row costs steps
    for key in keys:
        assert_same_run(events[key], reference[key][0])
    assert len(steps) > piped_steps
    # and a dense step computes every held row, through the layers and the head, in one
    # call each, as one batch tensor does; a compact one only the live rows
    assert all(len(layers) == len(heads) == 1 for _, layers, heads in steps)
    if lockstep == "dense":
        assert all(layers == heads == [held] for held, layers, heads in steps)
    else:
        assert any(layers[0] < held for held, layers, _ in steps)
        assert all(layers == heads for _, layers, heads in steps)


def test_an_unknown_lockstep_is_refused(ouro_tiny):
    with pytest.raises(ValueError, match="lockstep must be 'dense', 'compact' or None"):
        ContinuousBatch(ouro_tiny, max_rows=2, lockstep="loose")  # type: ignore[arg-type]


def test_a_joined_runs_prompt_events_come_before_the_next_joiners_prefill_and_the_decode(
    ouro_tiny, reference
):
    # given a run decoding and two requests arriving together, with budget for both
    batch = ContinuousBatch(ouro_tiny, max_rows=3)
    batch.add("recompute", *REQUESTS["recompute"])
    while not batch.runs["recompute"].joined:
        batch.step()
    batch.add("greedy", *REQUESTS["greedy"])
    batch.add("fixed", *REQUESTS["fixed"])
    row = batch.scheduler.row_of("recompute")
    assert row is not None
    work = batch.decoding.works[row]
    decoded = work.token_loops_executed

    # when the first half of the step yields its first joined run
    joins = batch.joins()
    first = next(joins)

    # then it holds that run's prompt events, before the other's prefill and the decode
    prompt = [e.to_dict() for e in first["greedy"].events]
    assert list(first) == ["greedy"]
    assert_same_run(prompt, [e for e in reference["greedy"][0] if e["phase"] == "prompt"])
    assert batch.runs["fixed"].report is None
    assert work.token_loops_executed == decoded
    # and the rest of the step prefills the other, then the decode runs a loop of each row
    assert [list(part) for part in joins] == [["fixed"]]
    batch.decode()
    assert work.token_loops_executed == decoded + 1


# Requests alike in their prefill settings (rule, KV policy, loops, lens width): the first
# three on q = 0.6, the last two on sampled halting, whose draws follow each one's seed
ALIKE = {
    "a": ("def loop(x):", GenerationParams(max_new_tokens=5, q=0.6)),
    "b": ("while True:", GenerationParams(max_new_tokens=6, q=0.6, temperature=0.8, seed=5)),
    "c": ("x = [1, 2]", GenerationParams(max_new_tokens=4, q=0.6, seed=2)),
    "p1": ("if a:", GenerationParams(max_new_tokens=4, exit_rule="ponder", seed=1)),
    "p2": ("if a:", GenerationParams(max_new_tokens=4, exit_rule="ponder", seed=2)),
}


def test_requests_alike_are_prefilled_together_and_each_runs_as_alone(ouro_tiny):
    # given five requests arriving together, in two kinds of prefill settings
    want = {key: alone(ouro_tiny, key, ALIKE) for key in ALIKE}
    for key, (run, _) in want.items():
        assert_no_near_tie(run, ALIKE[key][1])
    batch = ContinuousBatch(ouro_tiny, max_rows=5, prefill_chunk=1)
    for key, (prompt, params) in ALIKE.items():
        batch.add(key, prompt, params)

    # when the batch takes its first step (one prompt position a step for each request)
    first = batch.step()

    # then the first kind shares one prefill, a row each, and the other kind waits for it
    runs = batch.runs
    assert not first
    assert runs["a"].prefilling is runs["b"].prefilling is runs["c"].prefilling is not None
    assert runs["p1"].prefilling is None and runs["p2"].prefilling is None
    assert [runs[key].prefill_row for key in "abc"] == [0, 1, 2]
    # and once the first kind has joined, the other kind shares one prefill too
    events: dict[Hashable, list[dict[str, Any]]] = {}
    while runs["p1"].prefilling is None:
        for joined, update in batch.step().items():
            events.setdefault(joined, []).extend(e.to_dict() for e in update.events)
    assert all(runs[key].joined for key in "abc")
    assert runs["p1"].prefilling is runs["p2"].prefilling
    assert (runs["p1"].prefill_row, runs["p2"].prefill_row) == (0, 1)

    # and when the batch runs to the end, every request streamed what it streams alone
    rest, summaries, _ = drive(batch, {})
    for key, more in rest.items():
        events.setdefault(key, []).extend(more)
    for key, (want_events, want_summary) in want.items():
        assert_same_run(events[key], want_events)
        for name in ("generated_tokens", "token_loops_executed", "token_loops_full"):
            assert summaries[key][name] == want_summary[name], (key, name)
    exits = {key: [e["exit_loop"] for e in want[key][0]] for key in ("p1", "p2")}
    assert exits["p1"] != exits["p2"]  # the seeds really changed the halting


def test_a_request_stopped_while_prefilled_with_others_leaves_them_unchanged(ouro_tiny):
    # given three alike requests prefilling together
    want = {key: alone(ouro_tiny, key, ALIKE) for key in ("a", "c")}
    batch = ContinuousBatch(ouro_tiny, max_rows=3, prefill_chunk=1)
    for key in ("a", "b", "c"):
        batch.add(key, *ALIKE[key])
    batch.step()
    assert batch.runs["b"].prefilling is batch.runs["a"].prefilling

    # when the middle one is stopped before its prefill is done
    batch.cancel("b")
    events, summaries, _ = drive(batch, {})

    # then it left with nothing generated, and the others ran as alone
    assert summaries["b"] == {"stopped": "stopped", "generated_tokens": 0}
    assert "b" not in events or not events["b"]
    for key in ("a", "c"):
        assert_same_run(events[key], want[key][0])
    assert not batch.busy


def test_long_prompts_prefill_in_groups_that_fit_the_position_bound(ouro_tiny):
    # given three alike requests with 10-position prompts, and room for 25 padded positions
    # in one shared prefill
    batch = ContinuousBatch(ouro_tiny, max_rows=3, prefill_chunk=1, prefill_group=25)
    for key in "xyz":
        batch.add(key, "0123456789", GenerationParams(max_new_tokens=1, q=0.6))

    # when the first prefill starts
    batch.step()

    # then two of them share it, and the third waits for the next
    runs = batch.runs
    assert runs["x"].prefilling is runs["y"].prefilling is not None
    assert runs["z"].prefilling is None
