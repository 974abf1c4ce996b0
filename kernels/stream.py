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
from weakref import WeakKeyDictionary

from kernels.cache import DepthKVCache
from kernels.checkpoint import LoadedModel
from kernels.engine import Engine, PrefillResult, TokenRecord
from kernels.params import RunParams
from kernels.rules import ACT, Convergence, ExitRule, Fixed, Ponder, QExit, kv_policy
from kernels.sampling import Sampler
from kernels.scheduler import RowSettings
from kernels.work import FlopModel, Work


@dataclass
class GenerationParams(RunParams):
    """One request's settings (the fields, defaults and bounds of ``RunParams``);
    ``validate`` raises ``ValueError`` with a clear message."""

    def validate(self) -> Self:
        super().validate()
        kv_policy(self.kv_policy)
        self.rule()
        self.sampler()
        return self

    def sampler(self) -> Sampler:
        return Sampler(temperature=self.temperature, top_p=self.top_p, seed=self.seed)

    def rule(self) -> ExitRule:
        if self.exit_rule == "q-exit":
            return QExit(self.q)
        if self.exit_rule == "convergence":
            return Convergence(self.kl_threshold)
        if self.exit_rule == "ponder":  # sampled per token from the request's seed
            return Ponder()
        if self.exit_rule == "act":
            return ACT(self.act_eps)
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


# Each tokenizer's texts of single tokens, decoded once: a token event names up to top_k
# tokens per loop, and decoding them took a tenth of a batched step on the shipped model.
_SINGLES: WeakKeyDictionary[Any, dict[int, str]] = WeakKeyDictionary()


class _Pieces:
    """Token texts that add up to the decoded text, even across multi-byte characters."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer, self.text = tokenizer, ""
        self.ids: list[int] = []
        self.singles = _SINGLES.setdefault(tokenizer, {})

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
        text = self.singles.get(token_id)
        if text is None:
            text = self.singles[token_id] = self.tokenizer.decode([token_id])
        return text


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


def encode_request(
    loaded: LoadedModel, prompt: str | list[int], params: GenerationParams
) -> list[int]:
    """Validate a request and encode its prompt text, or take its token ids as they are
    (ValueError naming the problem)."""
    params.validate()
    if isinstance(prompt, str):
        prompt = list(loaded.tokenizer.encode(prompt))
    elif any(not 0 <= i < loaded.config.vocab_size for i in prompt):
        raise ValueError(f"prompt token ids must lie in [0, {loaded.config.vocab_size})")
    if not prompt:
        raise ValueError("the prompt encodes to no tokens")
    limit = loaded.config.max_position_embeddings
    if len(prompt) + params.max_new_tokens > limit:
        raise ValueError(
            f"prompt ({len(prompt)} tokens) + max_new_tokens ({params.max_new_tokens}) "
            f"exceeds the model's {limit} positions"
        )
    return prompt


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
    )


def end_token(loaded: LoadedModel) -> int | None:
    eos = getattr(loaded.tokenizer, "eos_token_id", None)
    return eos if eos is not None else loaded.config.eos_token_id


class RunReport:
    """One run's events and summary from its runner's records, alone or in a batch: the
    work counters, texts and exits accumulate here, so both paths report alike.
    ``settings``: the run's own (its rows' in the runner)."""

    def __init__(
        self, loaded: LoadedModel, prompt: list[int], runner: Engine, settings: RowSettings
    ) -> None:
        self.prompt, self.engine, self.settings = prompt, runner, settings
        self.pieces, self.flops = _Pieces(loaded.tokenizer), FlopModel(loaded.config)
        self.start = time.perf_counter()
        self.exits: list[int] = []
        self.prompt_work = Work()
        self.first_token_s: float | None = None
        self.decode_start = 0.0
        self.n_generated = 0

    def prompt_events(
        self, prefill: PrefillResult, top_k: int, row: int = 0
    ) -> Iterator[TokenEvent]:
        """One event per prompt position of the prefill's row ``row`` (this run's), the
        work counters accumulated position by position."""
        engine, flops, cap = self.engine, self.flops, self.settings.n_loops
        running = Work()
        for record in engine.prompt_records(prefill, row):
            keys = record.position + 1
            running.token_loops_executed += record.loops_computed
            running.token_loops_full += cap
            running.flops_executed += flops.loops(
                record.loops_computed, keys * record.loops_computed
            )
            running.flops_executed += flops.head * record.loops_computed  # the logit lens
            running.flops_full += flops.loops(cap, keys * cap)
            running.flops_full += flops.head * engine.full_heads(cap)
            self.exits.append(record.exit_loop)
            yield self._event(record, running, prefill.cache, top_k)
        self.prompt_work = engine.prompt_work(prefill, row)
        self.decode_start = time.perf_counter()

    def generated(
        self, record: TokenRecord, work: Work, cache: DepthKVCache, top_k: int
    ) -> TokenEvent:
        """The event of a generated token; ``work`` is the run's decode work so far."""
        self.n_generated += 1
        self.exits.append(record.exit_loop)
        self.first_token_s = self.first_token_s or time.perf_counter() - self.start
        return self._event(record, self.prompt_work + work, cache, top_k)

    def summary(self, work: Work, cache: DepthKVCache, stopped: str) -> dict[str, Any]:
        decode_s = time.perf_counter() - self.decode_start
        total, n = self.prompt_work + work, self.n_generated
        generated_exits = self.exits[len(self.prompt) :]
        return _json_safe(
            {
                "prompt_tokens": len(self.prompt),
                "generated_tokens": n,
                "average_exit_loop": sum(self.exits) / len(self.exits),
                "average_exit_loop_generated": (
                    sum(generated_exits) / len(generated_exits) if generated_exits else None
                ),
                "loops": self.settings.n_loops,
                **total.to_dict(),
                "executed_fraction": total.executed_fraction,
                "tokens_per_s": n / decode_s if n and decode_s > 0 else None,
                "time_to_first_token_s": self.first_token_s,
                "elapsed_s": time.perf_counter() - self.start,
                "kv_bytes": cache.live_bytes,
                "peak_kv_bytes": cache.peak_bytes,
                "kv_policy": self.settings.policy.name,
                "exit_rule": self.settings.rule.name,
                "stopped": stopped,
            }
        )

    def _event(
        self, record: TokenRecord, work: Work, cache: DepthKVCache | None, top_k: int
    ) -> TokenEvent:
        assert cache is not None
        pieces = self.pieces
        loops = [
            {
                "loop": t + 1,
                "gate_lambda": record.gate_lambda[t],
                "exit_p": record.exit_p[t],
                "cumulative": record.cumulative[t],
                "kl": record.kl[t],
                "top": [(i, pieces.single(i), p) for i, p in record.top[t][:top_k]],
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
            elapsed_s=time.perf_counter() - self.start,
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
    work = Work()
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
