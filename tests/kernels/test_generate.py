import json

import pytest

from kernels.generate import generate_stream
from kernels.request import GenerationParams
from kernels.settling import settling_loop

PROMPT = "def loop(x):"


def run(loaded, params, prompt=PROMPT, **kwargs):
    stream = generate_stream(loaded, prompt, params, **kwargs)
    return [event.to_dict() for event in stream], stream.summary


def test_one_event_per_position_prompt_first(ouro_tiny):
    # when
    events, summary = run(ouro_tiny, GenerationParams(max_new_tokens=5, q=0.6))

    # then
    n_prompt = len(PROMPT.encode())
    assert [e["position"] for e in events] == list(range(n_prompt + 5))
    assert [e["phase"] for e in events] == ["prompt"] * n_prompt + ["generated"] * 5
    assert "".join(e["text"] for e in events[:n_prompt]) == PROMPT
    assert summary["prompt_tokens"] == n_prompt and summary["generated_tokens"] == 5
    json.dumps(events), json.dumps(summary)  # JSON-safe


def test_events_carry_the_loops_and_the_work(ouro_tiny):
    events, summary = run(ouro_tiny, GenerationParams(max_new_tokens=3, q=0.6, top_k=4))

    for event in events:
        assert len(event["loops"]) == event["loops_computed"] == event["exit_loop"]
        assert [entry["loop"] for entry in event["loops"]] == list(range(1, event["exit_loop"] + 1))
        for entry in event["loops"]:
            assert 0 <= entry["gate_lambda"] <= 1 and len(entry["top"]) == 4
            token_id, text, prob = entry["top"][0]
            assert isinstance(token_id, int) and isinstance(text, str) and 0 < prob <= 1
    works = [e["work"] for e in events]
    executed = [w["token_loops_executed"] for w in works]
    assert executed == sorted(executed)
    assert executed[-1] == summary["token_loops_executed"] < summary["token_loops_full"]
    assert summary["peak_kv_bytes"] >= summary["kv_bytes"] > 0
    assert summary["kv_policy"] == "best-available" and summary["exit_rule"] == "q-exit"


def test_streamed_flops_never_exceed_the_full_depth_baseline(ouro_tiny):
    # given the logit lens at every loop, at full depth and with exits
    full, full_summary = run(ouro_tiny, GenerationParams(max_new_tokens=4, q=1.0, top_k=4))
    _, summary = run(ouro_tiny, GenerationParams(max_new_tokens=4, q=0.6, top_k=4))

    # then full depth executes exactly its baseline, at every event, and exits execute less
    for event in full:
        assert event["work"]["flops_executed"] == pytest.approx(event["work"]["flops_full"])
    assert full_summary["flops_executed"] == pytest.approx(full_summary["flops_full"])
    assert summary["flops_executed"] < summary["flops_full"]


def test_same_request_same_events(ouro_tiny):
    params = GenerationParams(max_new_tokens=6, q=0.7, temperature=0.9, top_p=0.9, seed=3)

    first, _ = run(ouro_tiny, params)
    second, _ = run(ouro_tiny, params)

    strip = [[(e["token_id"], e["exit_loop"]) for e in events] for events in (first, second)]
    assert strip[0] == strip[1]


def test_seed_changes_sampled_tokens(ouro_tiny):
    def tokens(seed):
        params = GenerationParams(max_new_tokens=12, temperature=1.5, seed=seed)
        return [e["token_id"] for e in run(ouro_tiny, params)[0]]

    assert tokens(1) != tokens(2)


@pytest.mark.parametrize(
    "params",
    [
        GenerationParams(exit_rule="convergence", kl_threshold=1e-2),
        GenerationParams(exit_rule="fixed", fixed_loops=2),
        GenerationParams(kv_policy="select", q=0.5),
        GenerationParams(kv_policy="recompute-kv", q=0.5, loops=5),
    ],
)
def test_every_rule_and_policy_streams(ouro_tiny, params):
    params.max_new_tokens = 3
    events, summary = run(ouro_tiny, params)

    assert len(events) == len(PROMPT.encode()) + 3
    assert summary["exit_rule"] == params.exit_rule and summary["kv_policy"] == params.kv_policy
    if params.exit_rule == "fixed":
        assert {e["exit_loop"] for e in events} == {2}
    if params.exit_rule == "convergence":
        assert all(e["loops"][0]["kl"] is None for e in events)


def test_should_stop_ends_generation_between_tokens(ouro_tiny):
    calls = []

    def should_stop():
        calls.append(1)
        return len(calls) >= 2

    events, summary = run(ouro_tiny, GenerationParams(max_new_tokens=10), should_stop=should_stop)

    assert sum(e["phase"] == "generated" for e in events) == 2
    assert summary["stopped"] == "stopped"


def test_generation_stops_at_eos(ouro_tiny):
    # given the first greedy token, declared as EOS
    first = [e for e in run(ouro_tiny, GenerationParams(max_new_tokens=1))[0]][-1]["token_id"]
    ouro_tiny.tokenizer.eos_token_id = first
    try:
        events, summary = run(ouro_tiny, GenerationParams(max_new_tokens=10))
    finally:
        ouro_tiny.tokenizer.eos_token_id = 0

    assert events[-1]["token_id"] == first and summary["generated_tokens"] == 1
    assert summary["stopped"] == "eos"


@pytest.mark.parametrize(
    "params, message",
    [
        (GenerationParams(exit_rule="halting"), "exit_rule must be one of"),
        (GenerationParams(exit_rule="act", act_eps=1.0), "act_eps must lie in"),
        (GenerationParams(q=1.5), "q must lie"),
        (GenerationParams(exit_rule="fixed"), "fixed_loops"),
        (GenerationParams(kv_policy="mask"), "kv_policy must be one of"),
        (GenerationParams(top_p=0.0), "top_p"),
        (GenerationParams(temperature=-1), "temperature"),
        (GenerationParams(max_new_tokens=10_000), "max_new_tokens must lie in"),
        (GenerationParams(loops=0), "loops"),
    ],
)
def test_bad_requests_are_clear_errors(ouro_tiny, params, message):
    with pytest.raises(ValueError, match=message):
        generate_stream(ouro_tiny, PROMPT, params)


def test_an_empty_prompt_is_refused(ouro_tiny):
    with pytest.raises(ValueError, match="no tokens"):
        generate_stream(ouro_tiny, "", GenerationParams())


def test_a_prompt_and_new_tokens_beyond_the_models_positions_are_refused(ouro_tiny):
    prompt = "x" * 400  # byte-level: 400 tokens, + 200 new > the 512 positions
    with pytest.raises(ValueError, match="exceeds the model's 512 positions"):
        generate_stream(ouro_tiny, prompt, GenerationParams(max_new_tokens=200))


def test_full_depth_events_carry_their_settling_loop(ouro_tiny):
    # given every loop computed, with a lens, and a run that skips loops
    full, _ = run(ouro_tiny, GenerationParams(max_new_tokens=4, q=1.0, top_k=2))
    skipping, _ = run(ouro_tiny, GenerationParams(max_new_tokens=4, q=0.5, top_k=2))
    blind, _ = run(ouro_tiny, GenerationParams(max_new_tokens=2, q=1.0, top_k=0))

    # then each full-depth position's settling loop is that of its per-loop top-1
    for event in full:
        top1 = [entry["top"][0][0] for entry in event["loops"]]
        assert event["settling_loop"] == settling_loop(top1)
    # and where a loop was skipped, or no lens ran, nothing is claimed
    partial = [e for e in skipping if e["loops_computed"] < len(full[0]["loops"])]
    assert partial and all(e["settling_loop"] is None for e in partial)
    assert all(e["settling_loop"] is None for e in blind)
