"""A row cannot fail its batch: a run whose own work raises in a step fails alone, with its
reason, and the runs batched with it finish with the tokens they get alone."""

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from django.db import connection

from kernels.generate import generate_stream
from kernels.request import GenerationParams
from kernels.sampling import Sampler
from playground.models import Run
from tests.kernels.test_poison_rows import PoisonedSampler, PoisonError
from tests.playground.conftest import TINY
from tests.workers.test_batching import RUNS, strip
from workers import execution
from workers.batching import BatchService
from workers.resident import resident_model

POISON_SEED = 666


@dataclass
class PoisonedParams(GenerationParams):
    """Settings whose sampler raises on the run's third draw (in the batch's decode)."""

    def sampler(self) -> Sampler:
        return PoisonedSampler(fail_on=3)


def test_a_poisoned_run_fails_alone_and_the_others_get_their_own_output():
    # given three good runs and a poisoned one submitted at once to one batch
    loaded = resident_model(TINY)
    service = BatchService(loaded, max_rows=4)
    alone = {key: strip(generate_stream(loaded, *RUNS[key])) for key in RUNS}
    runs = RUNS | {"poison": ("while x:", PoisonedParams(max_new_tokens=6, q=0.6))}
    barrier = threading.Barrier(len(runs))

    def run(key):
        barrier.wait()
        handle = service.submit(key, *runs[key])
        try:
            return strip(handle), handle.summary
        except PoisonError as exc:
            return exc, None

    # when
    with ThreadPoolExecutor(len(runs)) as pool:
        results = dict(zip(runs, pool.map(run, runs), strict=True))

    # then the poisoned run ended with its reason
    error, _ = results.pop("poison")
    assert isinstance(error, PoisonError) and str(error) == "draw 3 is poisoned"
    # and the others ran as they do alone
    for key, (events, summary) in results.items():
        assert events == alone[key]
        assert summary["stopped"] == "max_new_tokens"
    assert not service.batch.busy and service.handles == {}


@pytest.mark.django_db(transaction=True)
def test_a_poisoned_run_fails_and_the_runs_batched_with_it_end_done(
    deployed_database, run_factory, monkeypatch
):
    # given three good runs and one whose sampler raises on its third draw (their four
    # task threads write at once: on SQLite a database as deployed, not the in-memory one)
    real_sampler = GenerationParams.sampler

    def sampler(params: GenerationParams) -> Sampler:
        return PoisonedSampler(fail_on=3) if params.seed == POISON_SEED else real_sampler(params)

    monkeypatch.setattr(GenerationParams, "sampler", sampler)
    requests = [
        ("def loop(x):", {"max_new_tokens": 6, "q": 0.6, "seed": 0}),
        ("import os", {"max_new_tokens": 5, "exit_rule": "fixed", "fixed_loops": 3}),
        ("x = 1", {"max_new_tokens": 4, "temperature": 0.9, "seed": 5}),
        ("while x:", {"max_new_tokens": 6, "q": 0.6, "seed": POISON_SEED}),
    ]
    runs = [run_factory(prompt=prompt, params=values) for prompt, values in requests]
    barrier = threading.Barrier(len(runs))

    def execute(run):
        barrier.wait()
        try:
            return execution.run_execute(run_id=run.id, worker="w")
        finally:
            connection.close()  # this thread's own

    # when their tasks run at once in one worker process
    with ThreadPoolExecutor(len(runs)) as pool:
        list(pool.map(execute, runs))

    # then
    *good, poisoned = (Run.objects.get(pk=run.pk) for run in runs)
    assert poisoned.status == "failed" and poisoned.error
    loaded = resident_model(TINY)
    for run in good:
        assert run.status == "done", run.error
        stream = generate_stream(loaded, run.prompt, GenerationParams(**run.params))
        alone = [(e.position, e.token_id) for e in stream]
        stored = list(run.tokens.order_by("position").values_list("position", "token_id"))
        assert stored == alone
