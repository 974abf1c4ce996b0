"""A row cannot fail its batch: whatever one run's own work raises in a step (a draw, an
event, its summary) ends that run alone with the error, and the others get what they get
alone."""

from collections.abc import Callable, Hashable
from typing import Any

import pytest

from kernels import batch as batch_module
from kernels.batch import ContinuousBatch
from kernels.report import RunReport
from kernels.request import GenerationParams
from kernels.sampling import Sampler
from tests.kernels.test_batch import REQUESTS, alone, assert_same_run

GOOD = ("greedy", "sampled", "fixed")
# prefilled together with "greedy" (the same prefill settings), so a poisoned row is also
# one of a shared prefill's rows
POISON = ("while x:", GenerationParams(max_new_tokens=6, q=0.6))


class PoisonError(RuntimeError):
    pass


class PoisonedSampler(Sampler):
    """Draws as the run's own sampler would, and raises on its ``fail_on``-th draw."""

    def __init__(self, fail_on: int) -> None:
        super().__init__()
        self.fail_on, self.calls = fail_on, 0

    def __call__(self, logits, row=0):
        self.calls += 1
        if self.calls == self.fail_on:
            raise PoisonError(f"draw {self.calls} is poisoned")
        return super().__call__(logits, row)


def poisoned_report(poisoned: list[int], method: str) -> type[RunReport]:
    """A ``RunReport`` whose ``method`` raises for the run of prompt ``poisoned``."""

    class Poisoned(RunReport):
        def generated(self, *args, **kwargs):
            if method == "generated" and self.prompt == poisoned and self.n_generated == 2:
                raise PoisonError("its third event is poisoned")
            return super().generated(*args, **kwargs)

        def summary(self, *args, **kwargs):
            if method == "summary" and self.prompt == poisoned:
                raise PoisonError("its summary is poisoned")
            return super().summary(*args, **kwargs)

    return Poisoned


def drive(batch: ContinuousBatch, after_first: Callable[[], None] = lambda: None):
    """Step until idle (``after_first``: called after the first step): each run's events,
    summary and error."""
    events: dict[Hashable, list[dict[str, Any]]] = {}
    summaries: dict[Hashable, dict[str, Any]] = {}
    errors: dict[Hashable, Exception] = {}
    steps = 0
    while batch.busy:
        if steps == 1:
            after_first()
        steps += 1
        for key, update in batch.step().items():
            events.setdefault(key, []).extend(e.to_dict() for e in update.events)
            if update.summary is not None:
                summaries[key] = update.summary
            if update.error is not None:
                errors[key] = update.error
    return events, summaries, errors


@pytest.fixture(scope="module")
def reference(ouro_tiny):
    return {key: alone(ouro_tiny, key) for key in GOOD}


@pytest.mark.parametrize("where", ["first draw", "third draw", "third event", "summary"])
def test_a_poisoned_row_fails_alone_and_the_others_run_as_alone(
    ouro_tiny, reference, monkeypatch, where
):
    # given three rows: the poisoned run and two good ones decode, the third good one
    # waits for a row (it takes the poisoned one's, if that leaves first)
    batch = ContinuousBatch(ouro_tiny, max_rows=3)
    poisoned = batch.prepare("poison", *POISON)
    if where.endswith("draw"):
        poisoned.sampler = PoisonedSampler(fail_on=1 if where == "first draw" else 3)
    else:
        method = "generated" if where == "third event" else "summary"
        monkeypatch.setattr(batch_module, "RunReport", poisoned_report(poisoned.prompt, method))
    batch.admit(poisoned)
    for key in GOOD:
        batch.add(key, *REQUESTS[key])

    # when
    events, summaries, errors = drive(batch)

    # then the poisoned run alone failed, with its reason
    assert list(errors) == ["poison"] and isinstance(errors["poison"], PoisonError)
    assert "poison" not in summaries
    # and the others ran as they do alone
    for key in GOOD:
        want_events, want_summary = reference[key]
        assert_same_run(events[key], want_events)
        assert summaries[key]["generated_tokens"] == want_summary["generated_tokens"]
        assert summaries[key]["stopped"] == want_summary["stopped"]
    assert not batch.busy and not batch.scheduler.busy and not batch.held


def test_a_raising_prefill_fails_only_the_requests_prefilled_together(
    ouro_tiny, reference, monkeypatch
):
    # given a good run decoding, and a request whose prefill raises
    batch = ContinuousBatch(ouro_tiny, max_rows=2)
    batch.add("fixed", *REQUESTS["fixed"])
    real_step = batch.engine.run_prefill_step
    poisoned = list(ouro_tiny.tokenizer.encode(POISON[0]))

    def run_prefill_step(step, prefilling):
        if prefilling.ids[0, : len(poisoned)].tolist() == poisoned:
            raise PoisonError("its prefill is poisoned")
        return real_step(step, prefilling)

    monkeypatch.setattr(batch.engine, "run_prefill_step", run_prefill_step)

    # when it joins once the good run decodes
    events, summaries, errors = drive(batch, lambda: batch.add("poison", *POISON))

    # then
    assert list(errors) == ["poison"] and not events.get("poison")
    want_events, want_summary = reference["fixed"]
    assert_same_run(events["fixed"], want_events)
    assert summaries["fixed"]["generated_tokens"] == want_summary["generated_tokens"]
    assert not batch.busy and not batch.joining
