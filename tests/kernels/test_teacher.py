"""Teacher forcing: a request's exits on a given text equal the engine's own on those tokens."""

import pytest
import torch

from kernels.engine import Engine
from kernels.generate import generate_stream
from kernels.request import GenerationParams
from kernels.teacher import teacher_forced_stream

PROMPT = "def loop(x):"


def _generated(ouro_tiny, **settings) -> tuple[list[int], int, list[dict]]:
    """A sampled run's token ids, its prompt length and its events."""
    stream = generate_stream(ouro_tiny, PROMPT, GenerationParams(max_new_tokens=12, **settings))
    events = [event.to_dict() for event in stream]
    prompt = sum(event["phase"] == "prompt" for event in events)
    return [event["token_id"] for event in events], prompt, events


@pytest.mark.parametrize(
    "sibling",
    [
        {"exit_rule": "q-exit", "q": 0.5},
        {"exit_rule": "convergence", "kl_threshold": 0.01, "kv_policy": "recompute-kv"},
        {"exit_rule": "fixed", "fixed_loops": 2, "kv_policy": "select"},
    ],
)
def test_a_sibling_forced_on_a_runs_tokens_equals_a_direct_engine_call(ouro_tiny, sibling):
    # given a sampled run's text (a sibling left to itself would write another)
    ids, prompt, events = _generated(ouro_tiny, temperature=0.9, seed=3)
    params = GenerationParams(**sibling)
    # when the sibling's settings are forced on that text
    forced = [event.to_dict() for event in teacher_forced_stream(ouro_tiny, ids, prompt, params)]
    # then every position holds the run's token, labelled as in the run
    assert [e["token_id"] for e in forced] == ids
    assert [e["phase"] for e in forced] == [e["phase"] for e in events]
    assert "".join(e["text"] for e in forced) == "".join(e["text"] for e in events)
    # and its exits and cumulative probabilities are the engine's on those tokens
    engine = Engine(ouro_tiny.model, params.rule(), params.kv_policy, trace=True, top_k=5)
    direct = engine.prompt_records(engine.prefill([ids]))
    assert [e["exit_loop"] for e in forced] == [record.exit_loop for record in direct]
    for event, record in zip(forced, direct, strict=True):
        cumulative = [row["cumulative"] for row in event["loops"]]
        torch.testing.assert_close(cumulative, record.cumulative[: record.loops_computed])


def test_forcing_a_greedy_runs_own_settings_reproduces_its_exits(ouro_tiny):
    ids, prompt, events = _generated(ouro_tiny, q=0.6)
    forced = teacher_forced_stream(ouro_tiny, ids, prompt, GenerationParams(q=0.6))
    assert [e.exit_loop for e in forced] == [e["exit_loop"] for e in events]
    assert forced.summary is not None and forced.summary["stopped"] == "teacher-forced"
    assert forced.summary["generated_tokens"] == len(ids) - prompt


def test_a_prompt_length_outside_the_text_is_refused(ouro_tiny):
    with pytest.raises(ValueError, match="prompt_tokens"):
        teacher_forced_stream(ouro_tiny, [1, 2, 3], 4, GenerationParams())
