"""Self-speculative decoding (kernels.speculate): lossless against plain decoding.

Greedy, a speculative run's tokens, exit loops and depth-indexed cache equal the plain
run's, over exit rules, KV policies, draft depths and lengths, alone and batched beside
plain rows; sampling, its tokens are distributed as the plain run's (a goodness-of-fit
test over many seeds on a tiny vocabulary)."""

import itertools
import math
from collections import Counter
from collections.abc import Hashable

import pytest
import torch

from kernels.batch import ContinuousBatch
from kernels.checkpoint import ByteTokenizer, LoadedModel
from kernels.config import preset
from kernels.engine import Engine
from kernels.generate import generate_stream
from kernels.model import LoopedLM
from kernels.request import GenerationParams
from kernels.rules import ACT, Convergence, Fixed, Ponder, QExit
from kernels.sampling import Sampler
from kernels.work import WorkCount

PROMPT = [1, 5, 9, 3, 7, 2, 44, 17]
RULES = {
    "q-exit": QExit(0.6),
    "convergence": Convergence(1e-2),
    "fixed": Fixed(3),
    "ponder": Ponder(),
    "act": ACT(0.01),
}


def decode(model, rule, policy, *, d=0, k=0, new=16, eos=None, sampler=None, prompt=PROMPT):
    """(records, cache, work) of one greedy run."""
    engine = Engine(model, rule, policy, top_k=3, seed=4, draft_loops=d, draft_tokens=k)
    prefill = engine.prefill([prompt], reserve=new)
    work = WorkCount()
    records = list(
        engine.decode(prefill, max_new_tokens=new, eos_token_id=eos, sampler=sampler, work=work)
    )
    return records, prefill.kept_cache(), work


def outcome(records):
    return [(r.position, r.token_id, r.exit_loop, r.loops_computed) for r in records]


def assert_same_cache(got, want):
    """Same positions, exit loops and K/V (terminal and each loop store), row 0."""
    n = want.e_len[0]
    assert got.e_len[0] == n
    assert torch.equal(got.exit_loop[0], want.exit_loop[0])  # nothing left past e_len
    torch.testing.assert_close(got.e_k[:, 0, :n], want.e_k[:, 0, :n], atol=1e-5, rtol=0)
    torch.testing.assert_close(got.e_v[:, 0, :n], want.e_v[:, 0, :n], atol=1e-5, rtol=0)
    assert got.loop_lens(0) == want.loop_lens(0)
    for mine, theirs in zip(got.loops, want.loops, strict=True):
        if theirs is None or not theirs.lens[0]:
            continue
        assert mine is not None
        for layer in range(want.n_layers):
            for a, b in zip(mine.row(layer, 0), theirs.row(layer, 0), strict=True):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("policy", ["best-available", "recompute-kv", "select", "first-loop-kv"])
def test_greedy_speculation_gives_the_plain_runs_tokens_exits_and_cache(ouro_tiny, rule, policy):
    # given the plain run
    model = ouro_tiny.model
    plain, plain_cache, _ = decode(model, RULES[rule], policy)
    # drafts mostly rejected (d 1) and mostly kept (d 3), k short and past the run's end
    for d, k in [(1, 3), (3, 16)] if policy != "recompute-kv" else [(2, 4), (3, 2)]:
        # when the same run drafts through d loops, k tokens at a time
        records, cache, work = decode(model, RULES[rule], policy, d=d, k=k)
        # then everything it leaves is the plain run's
        assert outcome(records) == outcome(plain), (d, k)
        assert_same_cache(cache, plain_cache)
        assert work.verify_steps > 0 and work.drafted_tokens > 0
        assert {r.draft for r in records} <= {"accepted", "verified"}


def test_drafts_are_accepted_and_rejected_at_the_first_drafted_token(ouro_tiny):
    # given draft depths whose drafts the verification mostly keeps, and mostly rejects
    model, rule = ouro_tiny.model, QExit(0.6)
    plain, _, _ = decode(model, rule, "best-available")
    shallow, _, shallow_work = decode(model, rule, "best-available", d=1, k=4)
    deep, _, deep_work = decode(model, rule, "best-available", d=3, k=4)
    # then both give the plain tokens; the shallow one had its first draft rejected in
    # every round (each token chosen by verification), the deep one kept drafts
    assert outcome(shallow) == outcome(plain) == outcome(deep)
    assert shallow_work.accepted_tokens == 0 and [r.draft for r in shallow] == ["verified"] * 16
    assert shallow_work.verify_steps == 15  # the last token runs alone: nothing to draft
    assert deep_work.accepted_tokens > 0
    assert sum(r.draft == "accepted" for r in deep) == deep_work.accepted_tokens


def test_a_draft_longer_than_the_tokens_left_drafts_only_those(ouro_tiny):
    model, rule = ouro_tiny.model, QExit(0.6)
    plain, plain_cache, _ = decode(model, rule, "best-available", new=3)
    records, cache, work = decode(model, rule, "best-available", d=3, k=16, new=3)
    assert outcome(records) == outcome(plain)
    assert_same_cache(cache, plain_cache)
    assert work.drafted_tokens <= 2  # the second and third tokens, never past the budget


def test_an_end_token_inside_a_verification_stops_the_run_there(ouro_tiny):
    # given a plain run, and an end token that it meets after a few tokens
    model, rule = ouro_tiny.model, QExit(0.6)
    plain, _, _ = decode(model, rule, "best-available", d=0, new=16, prompt=[3, 1, 4, 1, 5])
    tokens = [r.token_id for r in plain]
    eos = next(t for t in tokens[2:] if t not in tokens[:2])
    stopped, stopped_cache, _ = decode(
        model, rule, "best-available", eos=eos, prompt=[3, 1, 4, 1, 5]
    )
    assert stopped[-1].token_id == eos and len(stopped) < 16
    for d, k in [(2, 8), (3, 8)]:
        # when a speculative run verifies past it
        records, cache, _ = decode(
            model, rule, "best-available", d=d, k=k, eos=eos, prompt=[3, 1, 4, 1, 5]
        )
        # then it stops at the end token, and the verified positions after it are dropped
        assert outcome(records) == outcome(stopped)
        assert_same_cache(cache, stopped_cache)


def test_speculative_runs_in_a_batch_beside_plain_rows_give_what_they_give_alone(ouro_tiny):
    # given plain and speculative requests, each with its own draft depth and length
    requests = {
        "plain": ("def loop(x):", GenerationParams(max_new_tokens=7, q=0.6)),
        "d1k2": (
            "import os",
            GenerationParams(max_new_tokens=9, q=0.6, speculate_loops=1, speculate_tokens=2),
        ),
        "d3k5": (
            "class A:",
            GenerationParams(max_new_tokens=11, q=0.5, speculate_loops=3, speculate_tokens=5),
        ),
        "d2k16": (
            "for i in",
            GenerationParams(
                max_new_tokens=6,
                q=0.5,
                kv_policy="recompute-kv",
                speculate_loops=2,
                speculate_tokens=16,
            ),
        ),
    }
    batch = ContinuousBatch(ouro_tiny, max_rows=3)
    for key, (prompt, params) in requests.items():
        batch.add(key, prompt, params)
    events: dict[Hashable, list[dict]] = {key: [] for key in requests}
    summaries = {}
    while batch.busy:
        for done, update in batch.step().items():
            assert update.error is None
            events[done].extend(e.to_dict() for e in update.events)
            if update.summary:
                summaries[done] = update.summary
    for key, (prompt, params) in requests.items():
        # then each gives what the same request gives alone, and what plain decoding gives
        stream = generate_stream(ouro_tiny, prompt, params)
        alone = [e.to_dict() for e in stream]
        plain = [
            e.to_dict()
            for e in generate_stream(
                ouro_tiny, prompt, GenerationParams(**{**vars(params), "speculate_loops": 0})
            )
        ]
        fields = ("position", "token_id", "exit_loop", "loops_computed")
        for got in (events[key], alone):
            assert [tuple(e[f] for f in fields) for e in got] == [
                tuple(e[f] for f in fields) for e in plain
            ]
        assert [e["draft"] for e in events[key]] == [e["draft"] for e in alone]
        assert stream.summary is not None
        assert summaries[key]["speculate"] == stream.summary["speculate"]


def test_the_streams_marks_add_up_and_the_acceptance_rate_is_their_count(ouro_tiny):
    params = GenerationParams(max_new_tokens=20, q=0.6, speculate_loops=3, speculate_tokens=4)
    stream = generate_stream(ouro_tiny, "def f(x):", params)
    generated = [e.to_dict() for e in stream if e.phase == "generated"]
    summary = stream.summary
    assert summary is not None
    marks = Counter(e["draft"] for e in generated)
    assert marks["accepted"] + marks["verified"] == len(generated) == summary["generated_tokens"]
    spec = summary["speculate"]
    assert spec["accepted"] == marks["accepted"] > 0
    assert spec["acceptance_rate"] == marks["accepted"] / spec["drafted"]
    assert spec["tokens_per_verify"] == len(generated) / spec["verify_steps"]
    # a plain run's events carry no mark and its summary no speculation
    plain = generate_stream(ouro_tiny, "def f(x):", GenerationParams(max_new_tokens=3))
    assert all(e.to_dict()["draft"] is None for e in plain)
    assert plain.summary is not None and plain.summary["speculate"] is None


def test_a_draft_depth_must_lie_below_the_runs_loops(ouro_tiny):
    with pytest.raises(ValueError, match="speculate_loops"):
        generate_stream(ouro_tiny, "x", GenerationParams(speculate_loops=4))
    with pytest.raises(ValueError, match="speculate_loops must be 0 under exit-kv"):
        GenerationParams(speculate_loops=1, kv_policy="exit-kv").validate()
    with pytest.raises(ValueError, match="cannot speculate"):
        Engine(ouro_tiny.model, QExit(0.6), "exit-kv", draft_loops=1, draft_tokens=2)
    with pytest.raises(ValueError, match="speculate_tokens"):
        GenerationParams(speculate_loops=1, speculate_tokens=17).validate()


def tiny_vocab_model(vocab: int) -> LoadedModel:
    config = preset("test-32").replace(vocab_size=vocab, total_ut_steps=3)
    torch.manual_seed(3)
    model = LoopedLM(config).eval()
    with torch.no_grad():  # sharper, varied distributions and exits
        model.lm_head.weight.mul_(6.0)
        model.model.early_exit_gate.weight.normal_(0.0, 2.4 / config.hidden_size**0.5)
    return LoadedModel(model=model, config=config, tokenizer=ByteTokenizer(vocab))


def chi2_upper(df: int, z: float = 3.09) -> float:
    """The chi-square quantile at the normal quantile z (Wilson-Hilferty; 3.09: p 0.001)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_sampled_speculation_draws_each_token_from_the_plain_distribution():
    # given a tiny vocabulary, and the plain run's exact probability of every 3-token
    # continuation (each step's distribution read from a full prefill of the prefix)
    vocab, prompt, temperature = 3, [1, 2, 0], 1.0
    loaded = tiny_vocab_model(vocab)
    engine = Engine(loaded.model, QExit(0.6))

    def next_probs(prefix):
        logits = engine.prefill([prefix]).logits[0, len(prefix) - 1]
        return torch.softmax(logits.double() / temperature, -1)

    exact = {}
    for seq in itertools.product(range(vocab), repeat=3):
        p, prefix = 1.0, list(prompt)
        for token in seq:
            p *= float(next_probs(prefix)[token])
            prefix.append(token)
        exact[seq] = p
    # when speculative runs (d 1, k 2: drafts disagree often) sample with many seeds
    runs = 500
    seen: Counter = Counter()
    spec = Engine(loaded.model, QExit(0.6), draft_loops=1, draft_tokens=2)
    for seed in range(runs):
        sampler = Sampler(temperature=temperature, seed=seed)
        prefill = spec.prefill([prompt], reserve=3)
        tokens = tuple(r.token_id for r in spec.decode(prefill, max_new_tokens=3, sampler=sampler))
        seen[tokens] += 1
    # then the counts fit the plain distribution (cells with few expected pooled)
    stat, df, pooled_obs, pooled_exp = 0.0, -1, 0, 0.0
    for seq, p in exact.items():
        expected = runs * p
        if expected < 5:
            pooled_obs, pooled_exp = pooled_obs + seen[seq], pooled_exp + expected
            continue
        stat += (seen[seq] - expected) ** 2 / expected
        df += 1
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        df += 1
    assert df >= 8
    assert stat < chi2_upper(df), (stat, df)


def test_a_sampled_speculative_run_replays_from_its_seed(ouro_tiny):
    params = GenerationParams(
        max_new_tokens=12,
        temperature=0.9,
        top_p=0.95,
        seed=11,
        speculate_loops=2,
        speculate_tokens=3,
    )
    first = [e.to_dict() for e in generate_stream(ouro_tiny, "import os", params)]
    again = [e.to_dict() for e in generate_stream(ouro_tiny, "import os", params)]
    assert [(e["token_id"], e["draft"]) for e in first] == [
        (e["token_id"], e["draft"]) for e in again
    ]


def test_a_speculative_run_cancelled_mid_draft_leaves_nothing_behind(ouro_tiny):
    # given a speculative run beside a plain one, and a request waiting for a row
    requests = {
        "spec": ("import os", GenerationParams(max_new_tokens=12, q=0.6, speculate_loops=3)),
        "plain": ("def f(x):", GenerationParams(max_new_tokens=8, q=0.6)),
        "next": ("class A:", GenerationParams(max_new_tokens=6, q=0.6)),
    }
    batch = ContinuousBatch(ouro_tiny, max_rows=2)
    for key in ("spec", "plain"):
        batch.add(key, *requests[key])
    events: dict[Hashable, list[dict]] = {key: [] for key in requests}
    cancelled = False
    while batch.busy:
        for done, update in batch.step().items():
            events[done].extend(e.to_dict() for e in update.events)
        if not cancelled and batch.decoder.rounds:  # the speculative run is drafting
            batch.cancel("spec")
            batch.add("next", *requests["next"])  # it takes the row the drafts were in
            cancelled = True
    # then the others give what they give alone: the drafts' entries never reach them
    assert cancelled and not batch.decoder.rounds and not batch.decoder.marks
    for key in ("plain", "next"):
        alone = [e.to_dict() for e in generate_stream(ouro_tiny, *requests[key])]
        fields = ("position", "token_id", "exit_loop", "loops_computed")
        assert [tuple(e[f] for f in fields) for e in events[key]] == [
            tuple(e[f] for f in fields) for e in alone
        ]
