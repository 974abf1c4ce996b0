"""The in-process batch service, with real threads: runs handed over at once share one
batch and each gets what it gets alone."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from kernels.stream import GenerationParams, generate_stream
from tests.playground.conftest import TINY
from workers.batching import BatchService
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
