"""One request generated alone, streamed: one event per position as it is computed.

    for event in generate_stream(loaded, "def add(a, b):", GenerationParams(q=0.7)):
        publish(event.to_dict())

The request is validated and encoded (:mod:`kernels.request`), prefilled and decoded by an
engine of its own settings (:mod:`kernels.engine`), and reported event by event
(:mod:`kernels.report`). Many requests sharing one decode are :mod:`kernels.batch`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kernels.checkpoint import LoadedModel
from kernels.engine import Engine
from kernels.report import RunReport, TokenEvent
from kernels.request import GenerationParams, encode_request, end_token
from kernels.work import WorkCount


@dataclass
class GenerationStream:
    """Iterator of :class:`TokenEvent`; ``summary`` is filled in once it is exhausted."""

    _events: Iterator[TokenEvent]
    summary: dict[str, Any] | None = field(default=None)

    def __iter__(self) -> GenerationStream:
        return self

    def __next__(self) -> TokenEvent:
        return next(self._events)


def generate_stream(
    loaded: LoadedModel,
    prompt_text: str,
    params: GenerationParams,
    should_stop: Callable[[], bool] = lambda: False,
) -> GenerationStream:
    """Run ``prompt_text`` through the engine and stream one event per position."""
    prompt = encode_request(loaded, prompt_text, params)
    stream = GenerationStream(iter(()))
    stream._events = _events(loaded, prompt, params, should_stop, stream)
    return stream


def request_engine(
    loaded: LoadedModel, params: GenerationParams, *, loops: int | None = None
) -> Engine:
    """The engine a request is prefilled (and, alone, decoded) by."""
    return Engine(
        loaded.model,
        params.rule(),
        params.kv_policy,
        loops=loops or params.loops,
        top_k=params.top_k,
        trace=True,
        seed=params.seed,
        draft_loops=params.speculate_loops,
        draft_tokens=params.speculate_tokens if params.speculate_loops else 0,
    )


def _events(
    loaded: LoadedModel,
    prompt: list[int],
    params: GenerationParams,
    should_stop: Callable[[], bool],
    stream: GenerationStream,
) -> Iterator[TokenEvent]:
    engine = request_engine(loaded, params)
    eos = end_token(loaded)
    report = RunReport(loaded, prompt, engine, engine.settings)
    prefill = engine.prefill([prompt], reserve=params.max_new_tokens)
    cache = prefill.cache
    assert cache is not None
    yield from report.prompt_events(prefill, params.top_k)
    work = WorkCount()
    stopped = "max_new_tokens"
    for record in engine.decode(
        prefill,
        max_new_tokens=params.max_new_tokens,
        sampler=params.sampler(),
        eos_token_id=eos,
        work=work,
    ):
        yield report.generated(record, work, cache, params.top_k)
        if record.token_id == eos:
            stopped = "eos"
        if should_stop():
            stopped = "stopped"
            break
    stream.summary = report.summary(work, cache, stopped)
