"""Streaming generation for the workers: one JSON-safe event per position.

    for event in generate_stream(loaded, "def add(a, b):", GenerationParams(q=0.7)):
        publish(event.to_dict())

Events come in position order: every prompt position (from prefill), then every generated
token once it has itself run its loops. The event of position i describes the token at i
and the loops computed at i, which produce the prediction of token i+1.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Self

from kernels.checkpoint import LoadedModel
from kernels.engine import Engine, TokenRecord
from kernels.params import RunParams
from kernels.rules import Convergence, ExitRule, Fixed, QExit, kv_policy
from kernels.sampling import Sampler
from kernels.work import FlopModel, Work


@dataclass
class GenerationParams(RunParams):
    """One request's settings (the fields, defaults and bounds of ``RunParams``);
    ``validate`` raises ``ValueError`` with a clear message."""

    def validate(self) -> Self:
        super().validate()
        kv_policy(self.kv_policy)
        self.rule()
        Sampler(temperature=self.temperature, top_p=self.top_p, seed=self.seed)
        return self

    def rule(self) -> ExitRule:
        if self.exit_rule == "q-exit":
            return QExit(self.q)
        if self.exit_rule == "convergence":
            return Convergence(self.kl_threshold)
        return Fixed(self.fixed_loops or 0)


@dataclass
class TokenEvent:
    position: int
    phase: str  # "prompt" | "generated"
    token_id: int
    text: str
    exit_loop: int
    loops_computed: int
    loops: list[dict[str, Any]]
    work: dict[str, float]
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


@dataclass
class GenerationStream:
    """Iterator of :class:`TokenEvent`; ``summary`` is filled in once it is exhausted."""

    _events: Iterator[TokenEvent]
    summary: dict[str, Any] | None = field(default=None)

    def __iter__(self) -> GenerationStream:
        return self

    def __next__(self) -> TokenEvent:
        return next(self._events)


class _Pieces:
    """Token texts that add up to the decoded text, even across multi-byte characters."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer, self.ids, self.text = tokenizer, [], ""

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids)
        common = 0
        for a, b in zip(self.text, text, strict=False):
            if a != b:
                break
            common += 1
        self.text = text
        return text[common:]

    def single(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])


def generate_stream(
    loaded: LoadedModel,
    prompt_text: str,
    params: GenerationParams,
    should_stop: Callable[[], bool] = lambda: False,
) -> GenerationStream:
    """Run ``prompt_text`` through the engine and stream one event per position."""
    params.validate()
    prompt = list(loaded.tokenizer.encode(prompt_text))
    if not prompt:
        raise ValueError("the prompt encodes to no tokens")
    limit = loaded.config.max_position_embeddings
    if len(prompt) + params.max_new_tokens > limit:
        raise ValueError(
            f"prompt ({len(prompt)} tokens) + max_new_tokens ({params.max_new_tokens}) "
            f"exceeds the model's {limit} positions"
        )
    stream = GenerationStream(iter(()))
    stream._events = _events(loaded, prompt, params, should_stop, stream)
    return stream


def _events(loaded, prompt, params, should_stop, stream) -> Iterator[TokenEvent]:
    engine = Engine(
        loaded.model,
        params.rule(),
        params.kv_policy,
        loops=params.loops,
        top_k=params.top_k,
        trace=True,
    )
    eos = getattr(loaded.tokenizer, "eos_token_id", None)
    eos = eos if eos is not None else loaded.config.eos_token_id
    pieces, flops = _Pieces(loaded.tokenizer), FlopModel(loaded.config)
    start = time.perf_counter()
    prefill = engine.prefill([prompt], reserve=params.max_new_tokens)
    cache = prefill.cache
    work = Work()
    running = Work()  # prompt counters, accumulated position by position
    exits: list[int] = []
    for record in engine.prompt_records(prefill):
        keys = record.position + 1
        running.token_loops_executed += record.loops_computed
        running.token_loops_full += engine.n_loops
        running.flops_executed += flops.loops(record.loops_computed, keys * record.loops_computed)
        running.flops_executed += flops.head * record.loops_computed  # the logit lens
        running.flops_full += flops.loops(engine.n_loops, keys * engine.n_loops)
        running.flops_full += flops.head * engine.full_heads
        exits.append(record.exit_loop)
        yield _event(record, pieces, running, cache, start)
    prompt_work = prefill.work
    first_token_s = None
    stopped = "max_new_tokens"
    decode_start = time.perf_counter()
    n_generated = 0
    for record in engine.decode(
        prefill,
        max_new_tokens=params.max_new_tokens,
        sampler=Sampler(temperature=params.temperature, top_p=params.top_p, seed=params.seed),
        eos_token_id=eos,
        work=work,
    ):
        n_generated += 1
        exits.append(record.exit_loop)
        first_token_s = first_token_s or time.perf_counter() - start
        yield _event(record, pieces, prompt_work + work, cache, start)
        if record.token_id == eos:
            stopped = "eos"
        if should_stop():
            stopped = "stopped"
            break
    decode_s = time.perf_counter() - decode_start
    total = prompt_work + work
    generated_exits = exits[len(prompt) :]
    stream.summary = _json_safe(
        {
            "prompt_tokens": len(prompt),
            "generated_tokens": n_generated,
            "average_exit_loop": sum(exits) / len(exits),
            "average_exit_loop_generated": (
                sum(generated_exits) / len(generated_exits) if generated_exits else None
            ),
            "loops": engine.n_loops,
            **total.to_dict(),
            "executed_fraction": total.executed_fraction,
            "tokens_per_s": n_generated / decode_s if n_generated and decode_s > 0 else None,
            "time_to_first_token_s": first_token_s,
            "elapsed_s": time.perf_counter() - start,
            "kv_bytes": cache.live_bytes,
            "peak_kv_bytes": cache.peak_bytes,
            "kv_policy": engine.policy.name,
            "exit_rule": engine.rule.name,
            "stopped": stopped,
        }
    )


def _event(record: TokenRecord, pieces: _Pieces, work: Work, cache, start: float) -> TokenEvent:
    loops = [
        {
            "loop": t + 1,
            "gate_lambda": record.gate_lambda[t],
            "exit_p": record.exit_p[t],
            "cumulative": record.cumulative[t],
            "kl": record.kl[t],
            "top": [(i, pieces.single(i), p) for i, p in record.top[t]],
        }
        for t in range(record.loops_computed)
    ]
    counters = {
        "token_loops_executed": work.token_loops_executed,
        "token_loops_full": work.token_loops_full,
        "flops_executed": work.flops_executed,
        "flops_full": work.flops_full,
        "kv_bytes": cache.live_bytes,
        "peak_kv_bytes": cache.peak_bytes,
    }
    return TokenEvent(
        position=record.position,
        phase=record.phase,
        token_id=record.token_id,
        text=pieces.push(record.token_id),
        exit_loop=record.exit_loop,
        loops_computed=record.loops_computed,
        loops=loops,
        work=counters,
        elapsed_s=time.perf_counter() - start,
    )
