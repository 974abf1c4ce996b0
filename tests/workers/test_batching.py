"""The in-process batch service, with real threads: runs handed over at once share one
batch and each gets what it gets alone."""

import copy
import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from kernels.generate import generate_stream
from kernels.request import GenerationParams
from tests.playground.conftest import TINY
from workers import batching
from workers.batching import BatchService, RunTimeLimitExceeded
from workers.resident import resident_model

# settings whose exits keep a margin from their thresholds (see tests/kernels/test_batch.py)
RUNS = {
    "a": ("def loop(x):", GenerationParams(max_new_tokens=6, q=0.6)),
    "b": ("import os", GenerationParams(max_new_tokens=5, exit_rule="fixed", fixed_loops=3)),
    "c": ("x = 1", GenerationParams(max_new_tokens=4, temperature=0.9, seed=5)),
}


def strip(events):
    return [(e.position, e.token_id, e.exit_loop, e.text) for e in events]


def test_runs_submitted_from_many_threads_each_get_their_own_output():
    # given
    loaded = resident_model(TINY)
    service = BatchService(loaded, max_rows=2)  # three runs, two rows: one waits its turn
    alone = {key: strip(generate_stream(loaded, *RUNS[key])) for key in RUNS}

    # when
    def run(key):
        handle = service.submit(key, *RUNS[key])
        return strip(handle), handle.summary

    with ThreadPoolExecutor(3) as pool:
        results = dict(zip(RUNS, pool.map(run, RUNS), strict=True))

    # then
    for key, (events, summary) in results.items():
        assert events == alone[key]
        assert summary["stopped"] == "max_new_tokens"


def test_a_cancelled_handle_ends_its_run_and_a_bad_one_queues_nothing():
    loaded = resident_model(TINY)
    service = BatchService(loaded, max_rows=2)
    handle = service.submit("long", "def f():", GenerationParams(max_new_tokens=200))

    seen = 0
    for event in handle:
        seen += event.phase == "generated"
        if seen == 2:
            handle.cancel()
    assert handle.summary is not None
    assert handle.summary["stopped"] == "stopped"
    assert 2 <= handle.summary["generated_tokens"] < 200

    with pytest.raises(ValueError, match="q must lie"):
        service.submit("bad", "x", GenerationParams(q=0))
    assert not service.batch.busy and service.handles == {}


class TroubledGate(torch.nn.Module):
    """The exit gate (every loop of every step calls it), which can be made to raise on
    its next call or to hold a step until released (only a call on ``hold_tokens``
    tokens, if set: one decode row, say, and not a prompt's prefill)."""

    def __init__(self, gate: torch.nn.Module) -> None:
        super().__init__()
        self.gate = gate
        self.fail_next = False
        self.hold_tokens: int | None = None
        self.entered, self.release = threading.Event(), threading.Event()
        self.release.set()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("injected step failure")
        if self.hold_tokens in (None, len(h)):
            self.entered.set()
            self.release.wait()
        return self.gate(h)


@pytest.fixture
def troubled():
    """The tiny model with a :class:`TroubledGate` (a copy: the resident one stays as is)."""
    loaded = resident_model(TINY)
    model = copy.deepcopy(loaded.model)
    gate = TroubledGate(model.model.early_exit_gate)
    model.model.register_module("early_exit_gate", gate)  # replaces the Linear
    return dataclasses.replace(loaded, model=model), gate


def first_generated(handle):
    iterator = iter(handle)
    while next(iterator).phase != "generated":
        pass
    return iterator


@pytest.mark.parametrize("cleanup_fails", [False, True])
def test_a_failed_step_fails_its_runs_and_later_runs_still_complete(
    troubled, monkeypatch, cleanup_fails
):
    # given two runs decoding in one batch
    loaded, gate = troubled
    monkeypatch.setattr(batching, "RETRY_AFTER_S", 0.01)
    service = BatchService(loaded, max_rows=2)
    long = GenerationParams(max_new_tokens=200)
    running = [first_generated(service.submit(key, "def f():", long)) for key in ("a", "b")]
    if cleanup_fails:  # the fresh batch cannot be built the first time either
        build = service._new_batch
        failures = iter([RuntimeError("no memory for a fresh batch")])

        def new_batch():
            if (failure := next(failures, None)) is not None:
                raise failure
            return build()

        monkeypatch.setattr(service, "_new_batch", new_batch)

    # when a step raises
    gate.fail_next = True

    # then both runs end with the reason
    for events in running:
        with pytest.raises(RuntimeError, match="injected step failure"):
            list(events)
    # and a run submitted later gets what it gets alone
    later = service.submit("c", *RUNS["c"])
    assert strip(later) == strip(generate_stream(resident_model(TINY), *RUNS["c"]))
    assert later.summary is not None and later.summary["stopped"] == "max_new_tokens"
    assert service.thread.is_alive() and service.handles == {}


def test_submit_and_cancel_do_not_wait_for_a_step(troubled):
    # given a step held inside the model
    loaded, gate = troubled
    service = BatchService(loaded, max_rows=2)
    gate.release.clear()
    held = service.submit("held", *RUNS["a"])
    assert gate.entered.wait(30)

    # when another thread submits and cancels while that step is still running
    def submit_and_cancel():
        handle = service.submit("b", *RUNS["b"])
        service.cancel("held")
        return handle

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(submit_and_cancel)
        # it returns while the step is held (the timeout guards a hang; it measures nothing)
        handle = future.result(timeout=30)
    gate.release.set()

    # then both take effect after the step: the cancelled run stops, the new one runs
    assert strip(handle) == strip(generate_stream(resident_model(TINY), *RUNS["b"]))
    list(held)
    assert held.summary is not None and held.summary["stopped"] == "stopped"


def test_a_joined_runs_prompt_events_are_handed_out_before_the_steps_decode(troubled):
    # given the first decode step of a run held inside the model (its prefill is not)
    loaded, gate = troubled
    service = BatchService(loaded, max_rows=2)
    prompt, params = RUNS["a"]
    prompt_tokens = len(loaded.tokenizer.encode(prompt))
    assert prompt_tokens > 1
    gate.hold_tokens = 1
    gate.release.clear()

    # when the run is submitted
    handle = service.submit("a", prompt, params)
    events = iter(handle)

    # then its prompt events reach the handle while the decode is held (before it, they
    # would wait for the release), and nothing else does
    pool = ThreadPoolExecutor(1)
    prompts = pool.submit(lambda: [next(events) for _ in range(prompt_tokens)])
    try:
        assert [e.phase for e in prompts.result(timeout=10)] == ["prompt"] * prompt_tokens
        assert gate.entered.wait(10) and handle.items.empty()
    finally:
        gate.release.set()
        pool.shutdown()
    assert strip([*prompts.result(), *events]) == strip(generate_stream(loaded, prompt, params))


def test_a_run_past_its_time_limit_leaves_the_batch_and_the_others_go_on():
    # given two runs in one batch, one with a limit it cannot meet
    loaded = resident_model(TINY)
    service = BatchService(loaded, max_rows=2)
    other = service.submit("a", *RUNS["a"])
    late = service.submit("late", "def f():", GenerationParams(max_new_tokens=200), 1e-6)

    # then the late one ends with the reason, and the other gives what it gives alone
    with pytest.raises(RunTimeLimitExceeded, match="time limit"):
        list(late)
    assert strip(other) == strip(generate_stream(loaded, *RUNS["a"]))
    assert service.handles == {}
    assert "late" not in service.batch.runs
