"""``python -m kernels.offline.bench``: what real skipping saves, measured against full depth.

For each model (the shipped checkpoint when present, and random Ouro-shaped ones), each
q-exit threshold and each KV policy it records, side by side: average exit depth, the
executed fraction of token-loop work, FLOPs, prefill wall time, decode tokens/s at
batch 1 and 8, peak KV bytes, and fidelity against full depth on the same text (top-1
agreement, mean log-likelihood difference). Times are medians of interleaved repeats and
are compared as ratios to full depth (q = 1, best-available) measured in the same run;
"kept" is the measured saving over the ideal saving 1 − executed fraction.

Batch-8 decode serves a queue of requests through 8 rows of the served continuous batch
(:class:`kernels.batch.ContinuousBatch`, per-loop trace and events included), and its
tokens/s is taken while all 8 rows are busy: a fixed batch of 8 would decode at the pace
of its deepest sequence, whatever the others skip. Random models decode by sampling
(temperature 1, seeded): greedy decoding of random weights repeats one token forever.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from kernels.batch import ContinuousBatch
from kernels.checkpoint import LoadedModel, default_device, load_checkpoint
from kernels.config import DTYPES, preset
from kernels.engine import Engine, PrefillResult, TokenRecord
from kernels.model import LoopedLM
from kernels.request import GenerationParams
from kernels.rules import QExit
from kernels.sampling import Sampler
from kernels.work import FlopModel, WorkCount

SHIPPED_MODEL = Path(__file__).parents[1] / "models" / "pydoc-loop"
POLICIES = ("best-available", "select", "recompute-kv")
BASELINE = (1.0, "best-available")
GOALS = {"prefill_kept": 0.85, "decode_kept": 0.70, "kv_over_depth": 1.10}
# below this many FLOPs per token-loop (about 2 × parameters of the shared layers), a CPU
# step is dominated by per-op Python/dispatch overhead, so time ratios say little
OVERHEAD_BOUND_FLOPS = 10e6
TEXT_MODULES = ("json", "collections", "itertools", "functools", "pathlib", "textwrap", "re")


@dataclass(frozen=True)
class Workload:
    prefill_rows: int = 4
    prefill_len: int = 512
    decode_prompt: int = 128
    decode_new: int = 24
    decode_prompts: int = 3  # batch 1: prompts decoded one after the other
    batch: int = 8
    requests: int = 24  # served through ``batch`` rows
    batch_prompt: int = 64
    batch_new: int = 16
    qs: tuple[float, ...] = (1.0, 0.9, 0.7, 0.5)
    repeats: int = 3


QUICK = Workload(
    prefill_rows=2,
    prefill_len=192,
    decode_prompt=32,
    decode_new=6,
    decode_prompts=2,
    requests=12,
    batch_prompt=16,
    batch_new=6,
    qs=(1.0, 0.7),
    repeats=1,
)


@dataclass
class Case:
    q: float
    policy: str
    times: dict[str, list[float]] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def median(self, key: str) -> float:
        return statistics.median(self.times[key])


def random_model(name: str, device: torch.device, dtype: torch.dtype, seed: int = 0) -> LoadedModel:
    """A randomly initialised model of a preset shape whose exits spread: the gate is
    redrawn so its logit has std 2.4 (as in the ouro-tiny fixture), not ~0.5, and the
    embeddings have unit scale, so a state keeps its token's identity next to the (unit
    RMS) layer outputs and exits depend on the token, not only on the context."""
    from kernels.checkpoint import ByteTokenizer

    config = preset(name).replace(dtype={v: k for k, v in DTYPES.items()}[dtype])
    torch.manual_seed(seed)
    with torch.device(device):  # a real-shape model is made where it runs
        model = LoopedLM(config)
    with torch.no_grad():
        model.model.early_exit_gate.weight.normal_(0.0, 2.4 / config.hidden_size**0.5)
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
    model = model.to(device=device, dtype=dtype).eval()
    return LoadedModel(model=model, config=config, tokenizer=ByteTokenizer(config.vocab_size))


def sample_text() -> str:
    """Deterministic offline English + code text: docstrings of a few stdlib modules."""
    parts = []
    for name in TEXT_MODULES:
        module = __import__(name)
        for attr in sorted(dir(module)):
            doc = inspect.getdoc(getattr(module, attr)) if not attr.startswith("_") else None
            if doc:
                parts.append(f"{name}.{attr}\n{doc}\n")
    return "\n".join(parts)


def token_rows(
    loaded: LoadedModel, n_rows: int, length: int, offset: int, real: bool
) -> list[list[int]]:
    if real:
        ids = list(loaded.tokenizer.encode(sample_text()))
        need = n_rows * length + offset
        ids = (ids * (need // max(len(ids), 1) + 1))[offset : offset + n_rows * length]
        return [ids[i * length : (i + 1) * length] for i in range(n_rows)]
    generator = torch.Generator().manual_seed(1234 + offset)
    return torch.randint(
        1, loaded.config.vocab_size, (n_rows, length), generator=generator
    ).tolist()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(device: torch.device, fn: Callable[[], Any]) -> tuple[Any, float, float]:
    _sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def fidelity(result: PrefillResult, full: PrefillResult) -> dict[str, float]:
    """Top-1 agreement with full depth and mean log-likelihood difference of the text."""
    agree, diffs = [], []
    for row, n in enumerate(result.lengths):
        ours, ref = result.logits[row, :n].float(), full.logits[row, :n].float()
        agree.append((ours.argmax(-1) == ref.argmax(-1)).float())
        target = result.ids[row, 1:n]
        ll = F.log_softmax(ours[:-1], -1).gather(1, target[:, None])
        ll_full = F.log_softmax(ref[:-1], -1).gather(1, target[:, None])
        diffs.append((ll - ll_full).squeeze(1))
    return {
        "top1_agreement": float(torch.cat(agree).mean()),
        "loglik_diff": float(torch.cat(diffs).mean()),
    }


def _engine(loaded: LoadedModel, case: Case) -> Engine:
    return Engine(loaded.model, QExit(case.q), case.policy)


def run_prefill(loaded: LoadedModel, cases: list[Case], load: Workload, real: bool) -> None:
    rows = token_rows(loaded, load.prefill_rows, load.prefill_len, 0, real)
    device = loaded.device
    results = {}
    for _ in range(load.repeats):
        for case in cases:

            def prefill(case: Case = case) -> PrefillResult:
                return _engine(loaded, case).prefill(rows)

            result, wall, cpu = _timed(device, prefill)
            case.times.setdefault("prefill_s", []).append(wall)
            case.times.setdefault("prefill_cpu_s", []).append(cpu)
            results[case.q, case.policy] = result
    full = results[BASELINE]
    for case in cases:
        result = results[case.q, case.policy]
        real_positions = result.exit_loop > 0
        case.values.update(
            avg_exit_loop=float(result.exit_loop[real_positions].float().mean()),
            avg_compute_depth=float(result.loops_computed[real_positions].float().mean()),
            prefill_tokens=sum(result.lengths),
            prefill_executed_fraction=result.work.executed_fraction,
            prefill_flops=result.work.flops_executed,
            prefill_flops_full=result.work.flops_full,
            prefill_peak_kv_bytes=result.kept_cache().peak_bytes,
            **fidelity(result, full),
        )


def run_decode_single(loaded: LoadedModel, cases: list[Case], load: Workload, real: bool) -> None:
    """Batch 1: ``decode_prompts`` prompts one after the other (exits depend on context)."""
    prompts = token_rows(loaded, load.decode_prompts, load.decode_prompt, 7, real)
    device = loaded.device
    for _ in range(load.repeats):
        for case in cases:
            wall = cpu = 0.0
            work, tokens, exits, peaks, depths = WorkCount(), 0, 0, [], []
            for prompt in prompts:
                engine = _engine(loaded, case)
                prefill = engine.prefill([prompt], reserve=load.decode_new)
                sampler = Sampler(temperature=0.0 if real else 1.0, seed=5)

                def decode(
                    engine: Engine = engine,
                    prefill: PrefillResult = prefill,
                    sampler: Sampler = sampler,
                    work: WorkCount = work,
                ) -> list[TokenRecord]:
                    return list(
                        engine.decode(
                            prefill, max_new_tokens=load.decode_new, sampler=sampler, work=work
                        )
                    )

                records, w, c = _timed(device, decode)
                wall, cpu = wall + w, cpu + c
                tokens += len(records)
                exits += sum(r.exit_loop for r in records)
                depth = prefill.loops_computed.flatten().tolist()
                depth += [r.loops_computed for r in records]
                depths.append(sum(depth) / len(depth))
                peaks.append(prefill.kept_cache().peak_bytes)
            case.times.setdefault("decode1_s", []).append(wall)
            case.times.setdefault("decode1_cpu_s", []).append(cpu)
            case.values.update(
                decode1_tokens=tokens,
                decode1_executed_fraction=work.executed_fraction,
                decode1_avg_exit_loop=exits / tokens,
                decode1_avg_compute_depth=depths,
                decode1_peak_kv_bytes=peaks,
            )


def run_decode_batch(loaded: LoadedModel, cases: list[Case], load: Workload, real: bool) -> None:
    """Continuous batching as it is served (:class:`kernels.batch.ContinuousBatch`):
    ``requests`` prompts through ``batch`` rows. Tokens/s and the executed fraction are
    taken over the decode halves of the steps until the queue is empty (every row busy
    all along); the joining requests' prefill halves are left out."""
    prompts = token_rows(loaded, load.requests, load.batch_prompt, 11, real)
    device, n_loops = loaded.device, loaded.config.total_ut_steps
    for _ in range(load.repeats):
        for case in cases:
            params = GenerationParams(
                max_new_tokens=load.batch_new,
                q=case.q,
                kv_policy=case.policy,
                temperature=0.0 if real else 1.0,
                seed=5,
                top_k=0,
            )
            batch = ContinuousBatch(
                loaded, max_rows=load.batch, capacity=load.batch_prompt + load.batch_new
            )
            for key, prompt in enumerate(prompts):
                batch.add(key, prompt, params)
            tokens = loops = 0
            seconds = cpu_seconds = 0.0
            while True:
                for _ in batch.joins():
                    pass
                if not batch.waiting:  # the next free row finds the queue empty
                    break
                updates, wall, cpu = _timed(device, batch.decode)
                seconds, cpu_seconds = seconds + wall, cpu_seconds + cpu
                for update in updates.values():
                    tokens += len(update.events)
                    loops += sum(event.loops_computed for event in update.events)
            case.times.setdefault("decode8_tokens_per_s", []).append(tokens / seconds)
            case.times.setdefault("decode8_cpu_tokens_per_s", []).append(tokens / cpu_seconds)
            case.values.update(
                decode8_window_tokens=tokens,
                decode8_executed_fraction=loops / (n_loops * tokens),
                decode8_peak_kv_bytes=batch.decoding.cache.peak_bytes,
            )


DRAFT_TOKENS = 4  # self-speculation's draft length k in the bench


def run_speculation(
    loaded: LoadedModel,
    load: Workload,
    draft_tokens: int = DRAFT_TOKENS,
    q: float = 0.7,
    depths: tuple[int, ...] | None = None,
) -> list[dict[str, Any]]:
    """Self-speculation (:mod:`kernels.speculate`) against plain decoding in the same run,
    greedy at ``q``, best-available, for every draft depth d < T: acceptance rate, tokens
    per verification, tokens/s at batch 1 (``decode_prompts`` prompts one after the
    other) and batch 8 (``batch`` requests decoded together), the ratio to plain per
    interleaved repeat (median, min, max), executed FLOPs and peak KV against plain, and
    whether the tokens and exits are the plain run's. ``depths``: the draft depths (default
    every d < T)."""
    # text where the vocabulary holds bytes (greedy decoding of random ids soon repeats)
    text = loaded.config.vocab_size >= 256
    prompts = token_rows(loaded, load.decode_prompts, load.decode_prompt, 7, text)
    joiners = token_rows(loaded, load.batch, load.batch_prompt, 11, text)
    runs = [0, *(depths or range(1, loaded.config.total_ut_steps))]  # 0: plain
    times: dict[tuple[int, str], list[float]] = {}
    seen: dict[int, dict[str, Any]] = {}
    for _ in range(load.repeats):
        for d in runs:
            k = draft_tokens if d else 0
            wall, work, outputs, peaks = 0.0, WorkCount(), [], []
            for prompt in prompts:
                engine = Engine(loaded.model, QExit(q), draft_loops=d, draft_tokens=k)
                prefill = engine.prefill([prompt], reserve=load.decode_new)

                def decode(
                    engine: Engine = engine,
                    prefill: PrefillResult = prefill,
                    work: WorkCount = work,
                ) -> list[TokenRecord]:
                    return list(engine.decode(prefill, max_new_tokens=load.decode_new, work=work))

                records, w, _ = _timed(loaded.device, decode)
                wall += w
                outputs.append([(r.token_id, r.exit_loop) for r in records])
                peaks.append(prefill.kept_cache().peak_bytes)
            times.setdefault((d, "decode1"), []).append(wall)
            params = GenerationParams(
                max_new_tokens=load.batch_new,
                q=q,
                top_k=0,
                speculate_loops=d,
                speculate_tokens=draft_tokens,
            )
            batch = ContinuousBatch(
                loaded, max_rows=load.batch, capacity=load.batch_prompt + load.batch_new
            )
            for key, prompt in enumerate(joiners):
                batch.add(key, prompt, params)
            tokens, seconds = 0, 0.0
            batch_out: dict[Hashable, list[tuple[int, int]]] = {}
            while batch.busy:
                for _ in batch.joins():
                    pass
                updates, w, _ = _timed(loaded.device, batch.decode)
                seconds += w
                for key, update in updates.items():
                    tokens += len(update.events)
                    batch_out.setdefault(key, []).extend(
                        (e.token_id, e.exit_loop) for e in update.events
                    )
            times.setdefault((d, "decode8"), []).append(seconds / tokens)
            seen[d] = {
                "outputs": outputs,
                "batch_outputs": batch_out,
                "work": work,
                "peaks": peaks,
            }
    rows = []
    plain = seen[0]
    for d in runs[1:]:
        mine = seen[d]
        spent: WorkCount = mine["work"]
        row: dict[str, Any] = {
            "draft_loops": d,
            "draft_tokens": draft_tokens,
            "q": q,
            "acceptance_rate": spent.accepted_tokens / max(spent.drafted_tokens, 1),
            "tokens_per_verify": sum(map(len, mine["outputs"])) / max(spent.verify_steps, 1),
            "identical": mine["outputs"] == plain["outputs"]
            and mine["batch_outputs"] == plain["batch_outputs"],
            "flops_vs_plain": spent.flops_executed / plain["work"].flops_executed,
            "peak_kv_vs_plain": max(
                a / b for a, b in zip(mine["peaks"], plain["peaks"], strict=True)
            ),
        }
        for phase in ("decode1", "decode8"):
            ratios = [
                base / spec for base, spec in zip(times[(0, phase)], times[(d, phase)], strict=True)
            ]
            row[f"{phase}_speedup"] = statistics.median(ratios)
            row[f"{phase}_speedup_range"] = (min(ratios), max(ratios))
        rows.append(row)
    return rows


def speculation_table(name: str, rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'d':>2} {'k':>2} {'accept':>6} {'tok/verify':>10} {'batch 1 x plain':>22} "
        f"{'batch 8 x plain':>22} {'FLOPs':>5} {'peak KV':>7} same"
    )
    lines = [f"== {name}: self-speculation, greedy, q {rows[0]['q'] if rows else '-'}", head]
    for v in rows:
        spans = [
            f"{v[f'{p}_speedup']:.2f} ({v[f'{p}_speedup_range'][0]:.2f}-"
            f"{v[f'{p}_speedup_range'][1]:.2f})"
            for p in ("decode1", "decode8")
        ]
        lines.append(
            f"{v['draft_loops']:>2} {v['draft_tokens']:>2} {v['acceptance_rate']:>6.2f} "
            f"{v['tokens_per_verify']:>10.2f} {spans[0]:>22} {spans[1]:>22} "
            f"{v['flops_vs_plain']:>5.2f} {v['peak_kv_vs_plain']:>7.2f} {v['identical']}"
        )
    return "\n".join(lines)


def summarise(cases: list[Case], loops: int) -> list[dict[str, Any]]:
    base = next(c for c in cases if (c.q, c.policy) == BASELINE)
    rows = []
    for case in cases:
        v = dict(case.values)
        v.update(q=case.q, policy=case.policy)
        for key in case.times:
            v[key] = case.median(key)
        for phase, key, fraction, higher_is_faster in (
            ("prefill", "prefill_s", "prefill_executed_fraction", False),
            ("prefill_cpu", "prefill_cpu_s", "prefill_executed_fraction", False),
            ("decode1", "decode1_s", "decode1_executed_fraction", False),
            ("decode1_cpu", "decode1_cpu_s", "decode1_executed_fraction", False),
            ("decode8", "decode8_tokens_per_s", "decode8_executed_fraction", True),
            ("decode8_cpu", "decode8_cpu_tokens_per_s", "decode8_executed_fraction", True),
        ):
            if key not in case.times:  # a phase this run did not measure
                continue
            ratio = (
                base.median(key) / case.median(key)
                if higher_is_faster
                else case.median(key) / base.median(key)
            )
            ideal = 1 - v[fraction]
            v[f"{phase}_time_ratio"] = ratio
            v[f"{phase}_kept"] = (1 - ratio) / ideal if ideal > 0.01 else None
        v["decode1_tokens_per_s"] = v["decode1_tokens"] / v["decode1_s"]
        v["prefill_kv_ratio"] = v["prefill_peak_kv_bytes"] / base.values["prefill_peak_kv_bytes"]
        v["prefill_kv_over_depth"] = v["prefill_kv_ratio"] / (v["avg_compute_depth"] / loops)
        v["decode1_kv_over_depth"] = max(  # the worst prompt
            (peak / full) / (depth / loops)
            for peak, full, depth in zip(
                v["decode1_peak_kv_bytes"],
                base.values["decode1_peak_kv_bytes"],
                v["decode1_avg_compute_depth"],
                strict=True,
            )
        )
        rows.append(v)
    return rows


def _verdict(ok: bool, text: str) -> str:
    return f"{'ok  ' if ok else 'MISS'} {text}"


def goals(rows: list[dict[str, Any]]) -> list[str]:
    """The project's targets, checked on this run's ratios."""
    lines = []
    for v in rows:
        tag = f"q={v['q']} {v['policy']}"
        if v["policy"] == "best-available" and v["q"] < 1:
            for phase, goal in (
                ("prefill", "prefill_kept"),
                ("decode1", "decode_kept"),
                ("decode8", "decode_kept"),
            ):
                kept = v[f"{phase}_kept"]
                if kept is not None:
                    text = f"{tag}: {phase} kept {kept:.2f} of the ideal saving"
                    lines.append(_verdict(kept >= GOALS[goal], f"{text} (goal {GOALS[goal]})"))
            for phase in ("prefill", "decode1"):
                ratio, bound = v[f"{phase}_kv_over_depth"], GOALS["kv_over_depth"]
                text = f"{tag}: {phase} peak KV = {ratio:.3f} x (depth/T x full-depth KV)"
                lines.append(_verdict(ratio <= bound, f"{text} (goal <= {bound})"))
        if v["policy"] == "select":
            prefill, decode = v["prefill_time_ratio"], v["decode1_time_ratio"]
            text = f"{tag}: time vs full depth: prefill {prefill:.2f}, decode {decode:.2f}"
            lines.append(_verdict(min(prefill, decode) >= 0.97, f"{text} (never faster, 3% noise)"))
    return lines


def notes(loaded: LoadedModel) -> list[str]:
    """Caveats that go with this model's numbers."""
    per_token_loop = FlopModel(loaded.config).loops(1, 0)
    if loaded.device.type == "cpu" and per_token_loop < OVERHEAD_BOUND_FLOPS:
        return [
            f"note: {per_token_loop / 1e6:.2f} MFLOP per token-loop: on CPU this model's steps "
            "are dominated by per-op overhead, not by the work skipped, so its time ratios "
            "(and kept) are not meaningful; FLOPs, executed fraction and KV are"
        ]
    return []


def table(name: str, rows: list[dict[str, Any]]) -> str:
    def fmt(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    head = (
        f"{'q':>4} {'policy':<14} {'depth':>5} {'exec':>5} {'GFLOP':>7} "
        f"{'prefill s':>9} {'ratio':>5} {'kept':>5} {'dec1 tok/s':>10} {'kept':>5} "
        f"{'dec8 tok/s':>10} {'exec8':>5} {'kept':>5} {'peak KV MiB':>11} {'kv/depth':>8} "
        f"{'top1':>5} {'dLL':>7}"
    )
    lines = [f"== {name}", head, "-" * len(head)]
    for v in rows:
        lines.append(
            f"{v['q']:>4} {v['policy']:<14} {v['avg_exit_loop']:>5.2f} "
            f"{v['prefill_executed_fraction']:>5.2f} {v['prefill_flops'] / 1e9:>7.1f} "
            f"{v['prefill_s']:>9.3f} {v['prefill_time_ratio']:>5.2f} "
            f"{fmt(v['prefill_kept'], '>5.2f')} "
            f"{v['decode1_tokens_per_s']:>10.1f} {fmt(v['decode1_kept'], '>5.2f')} "
            f"{v['decode8_tokens_per_s']:>10.1f} {v['decode8_executed_fraction']:>5.2f} "
            f"{fmt(v['decode8_kept'], '>5.2f')} {v['prefill_peak_kv_bytes'] / 2**20:>11.2f} "
            f"{v['prefill_kv_over_depth']:>8.3f} {v['top1_agreement']:>5.3f} "
            f"{v['loglik_diff']:>7.3f}"
        )
    return "\n".join(lines)


def bench_model(name: str, loaded: LoadedModel, load: Workload, real: bool) -> dict[str, Any]:
    cases = [Case(q, p) for q in load.qs for p in POLICIES]
    warm = Workload(**{**load.__dict__, "repeats": 1, "requests": load.batch + 1})
    for run in (run_prefill, run_decode_single, run_decode_batch):  # warm up, untimed
        run(loaded, [Case(*BASELINE), Case(min(load.qs), "best-available")], warm, real)
    run_prefill(loaded, cases, load, real)
    run_decode_single(loaded, cases, load, real)
    run_decode_batch(loaded, cases, load, real)
    rows = summarise(cases, loaded.config.total_ut_steps)
    return {
        **describe(name, loaded, real),
        "rows": rows,
        "goals": goals(rows),
        "notes": notes(loaded),
        "speculation": run_speculation(loaded, load),
    }


def describe(name: str, loaded: LoadedModel, real: bool) -> dict[str, Any]:
    """The model's name and shape, and the text it was measured on."""
    cfg = loaded.config
    return {
        "model": name,
        "shape": {
            "hidden_size": cfg.hidden_size,
            "layers": cfg.num_hidden_layers,
            "heads": cfg.num_attention_heads,
            "kv_heads": cfg.num_key_value_heads,
            "intermediate_size": cfg.intermediate_size,
            "vocab_size": cfg.vocab_size,
            "loops": cfg.total_ut_steps,
            "dtype": str(loaded.dtype).removeprefix("torch."),
        },
        "text": "stdlib docstrings" if real else "random token ids",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernels.offline.bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--model", type=Path, help=f"checkpoint dir (default {SHIPPED_MODEL} if present)"
    )
    parser.add_argument(
        "--random",
        default="bench-512,ouro-tiny",
        help="random presets, comma-separated ('' for none)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small workload, one repeat (< 1 minute)"
    )
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument(
        "--speculation", action="store_true", help="only self-speculation against plain"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--repeats", type=int, help="interleaved repeats (median)")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    args = parser.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    try:
        return _run(args)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def _run(args: argparse.Namespace) -> int:
    load = QUICK if args.quick else Workload()
    if args.repeats:
        load = Workload(**{**load.__dict__, "repeats": args.repeats})
    device = torch.device(args.device) if args.device else default_device()
    dtype = DTYPES[args.dtype]
    models: list[tuple[str, Callable[[], LoadedModel], bool]] = []
    path = args.model or (SHIPPED_MODEL if SHIPPED_MODEL.is_dir() else None)
    if path is not None:
        models.append((str(path), lambda: load_checkpoint(path, device=device, dtype=dtype), True))
    for name in (n for n in args.random.split(",") if n):
        models.append((f"random {name}", partial(random_model, name, device, dtype), False))
    if args.quick:
        models = models[:1]  # the shipped model if present, else the first random one

    report = {
        "command": " ".join(["python -m kernels.offline.bench", *args.argv]),
        "torch": torch.__version__,
        "device": str(device),
        "threads": args.threads,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "workload": load.__dict__,
        "models": [],
    }
    for name, build, real in models:
        torch.manual_seed(0)
        if args.speculation:
            loaded = build()
            result = {**describe(name, loaded, real), "speculation": run_speculation(loaded, load)}
        else:
            result = bench_model(name, build(), load, real)
            print(table(name, result["rows"]))
            print("\n".join(result["goals"] + result["notes"]), flush=True)
        report["models"].append(result)
        print(speculation_table(name, result["speculation"]), flush=True)
        print()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
