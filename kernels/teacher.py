"""Teacher forcing: a request's exits and probabilities on a given text, with no sampling.

The playground's "same text" comparison scores a sibling's settings on the first run's
tokens: the whole text goes through the engine's prefill with the sibling's own exit
rule, KV policy, loops and seed, so every position gets the exit loop, λ, p, cumulative
exit probability and top-k it has under those settings when it reads exactly that text.
A causal prefill is what decoding the same tokens one by one computes (an exited token's
K/V follows the request's KV policy either way), so depths compare position by position.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from kernels.checkpoint import LoadedModel
from kernels.generate import GenerationStream, request_engine
from kernels.report import RunReport, TokenEvent
from kernels.request import GenerationParams
from kernels.work import WorkCount


def teacher_forced_stream(
    loaded: LoadedModel, token_ids: list[int], prompt_tokens: int, params: GenerationParams
) -> GenerationStream:
    """One event per position of ``token_ids`` under ``params``' rule, KV policy, loops
    and seed: positions from ``prompt_tokens`` on are labelled generated, as in the run
    the text came from. Sampling settings are not used: nothing is drawn."""
    params.validate()
    if not 0 < prompt_tokens <= len(token_ids):
        raise ValueError(f"prompt_tokens must be in 1..{len(token_ids)}, got {prompt_tokens}")
    limit = loaded.config.max_position_embeddings
    if len(token_ids) > limit:
        raise ValueError(f"{len(token_ids)} tokens exceed the model's {limit} positions")
    stream = GenerationStream(iter(()))
    stream._events = _events(loaded, token_ids, prompt_tokens, params, stream)
    return stream


def _events(
    loaded: LoadedModel,
    token_ids: list[int],
    prompt_tokens: int,
    params: GenerationParams,
    stream: GenerationStream,
) -> Iterator[TokenEvent]:
    engine = request_engine(loaded, params)
    report = RunReport(loaded, token_ids[:prompt_tokens], engine, engine.settings)
    prefill = engine.prefill([token_ids])
    assert prefill.cache is not None
    for event in report.prompt_events(prefill, params.top_k):
        if event.position >= prompt_tokens:
            event = dataclasses.replace(event, phase="generated")
        yield event
    report.n_generated = len(token_ids) - prompt_tokens
    summary = report.summary(WorkCount(), prefill.cache, "teacher-forced")
    # nothing was generated token by token: no decoding speed to report
    stream.summary = summary | {"tokens_per_s": None, "time_to_first_token_s": None}
