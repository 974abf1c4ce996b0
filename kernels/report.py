"""What a run reports: one JSON-safe event per position, and its summary.

Events come in position order: every prompt position (from prefill), then every generated
token once it has itself run its loops. The event of position i describes the token at i
and the loops computed at i, which produce the prediction of token i+1. A run alone
(:mod:`kernels.generate`) and a run in a continuous batch (:mod:`kernels.batch`) report
through the same :class:`RunReport`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any
from weakref import WeakKeyDictionary

from kernels.cache import DepthKVCache
from kernels.checkpoint import LoadedModel
from kernels.engine import Engine, PrefillResult, TokenRecord
from kernels.scheduler import RowSettings
from kernels.settling import settling_loop
from kernels.work import FlopModel, WorkCount


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
    # the oracle exit (``kernels.settling``) where every loop to the cap ran with a lens
    settling_loop: int | None = None

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
        self.prompt_work = WorkCount()
        self.first_token_s: float | None = None
        self.decode_start = 0.0
        self.n_generated = 0

    def prompt_events(
        self, prefill: PrefillResult, top_k: int, row: int = 0
    ) -> Iterator[TokenEvent]:
        """One event per prompt position of the prefill's row ``row`` (this run's), the
        work counters accumulated position by position."""
        engine, flops, cap = self.engine, self.flops, self.settings.n_loops
        running = WorkCount()
        for record in engine.prompt_records(prefill, row):
            keys = record.position + 1
            n = record.loops_computed
            flops.count_loops(running, n, keys * n)
            flops.count_heads(running, n)  # the logit lens
            flops.count_full(running, 1, keys, cap, engine.full_heads(cap))
            self.exits.append(record.exit_loop)
            yield self._event(record, running, prefill.cache, top_k)
        self.prompt_work = engine.prompt_work(prefill, row)
        self.decode_start = time.perf_counter()

    def generated(
        self, record: TokenRecord, work: WorkCount, cache: DepthKVCache, top_k: int
    ) -> TokenEvent:
        """The event of a generated token; ``work`` is the run's decode work so far."""
        self.n_generated += 1
        self.exits.append(record.exit_loop)
        self.first_token_s = self.first_token_s or time.perf_counter() - self.start
        return self._event(record, self.prompt_work + work, cache, top_k)

    def summary(self, work: WorkCount, cache: DepthKVCache, stopped: str) -> dict[str, Any]:
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
        self, record: TokenRecord, work: WorkCount, cache: DepthKVCache | None, top_k: int
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
            settling_loop=self._settling(record, top_k),
        )

    def _settling(self, record: TokenRecord, top_k: int) -> int | None:
        """The position's settling loop, known only when it computed every loop up to the
        run's cap and the lens named each loop's top-1."""
        if not top_k or record.loops_computed < self.settings.n_loops:
            return None
        top1 = [top[0][0] for top in record.top[: record.loops_computed] if top]
        return settling_loop(top1) if len(top1) == record.loops_computed else None
