"""Train the shipped looped LM end to end: corpus -> tokenizer -> stage 1 -> stage 2 -> save.

    python -m kernels.offline.train                      # writes kernels/models/pydoc-loop/
    python -m kernels.offline.train --resume    # continue from var/train/pydoc-loop/state.pt
    python -m kernels.offline.train --restart-stage2 --gain-margin 0.02   # retune the gate only
    python -m kernels.offline.train --task addition   # writes kernels/models/add-loop/
    python -m kernels.offline.train --task hops       # writes kernels/models/hop-loop/

Stage one trains everything on Ouro's ``sum_t p_t L_t - beta H(p)``; stage two freezes
the LM and fits the gate to the realised gains of the next loop (:mod:`kernels.offline.objectives`).
Everything is seeded: the model init from ``seed``, and batch ``k`` of stage ``s`` from
(seed, s, k) alone, so a resumed run sees the same batches as an uninterrupted one. The
run state is saved every ``save_every`` steps; the final directory gets the checkpoint,
``training.json`` (settings, steps, wall times, validation history), then the evaluation
and the model card (:mod:`kernels.offline.evaluate`).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm
from transformers import PreTrainedTokenizerFast

from kernels.checkpoint import ByteTokenizer, save_checkpoint
from kernels.config import LoopConfig
from kernels.exits import q_exit
from kernels.model import LoopedLM
from kernels.offline import corpus, hops, tasks
from kernels.offline.bpe import train_bpe
from kernels.offline.card import write_card
from kernels.offline.objectives import (
    context_exit_losses,
    gate_loss,
    per_loop_losses,
    ponder_loss,
)


@dataclass
class TrainConfig:
    """Every setting of a run; each is also a ``--flag`` of the command. ``--task
    addition`` starts from :data:`TASK_DEFAULTS` instead of these defaults."""

    # "text": the corpus LM; "addition", "hops": :mod:`kernels.offline.tasks`
    task: str = "text"
    digits: int = 10  # addition: operand width
    max_chain: int = 6  # addition: longest carry chain in training problems
    symbols: int = 8  # hops: letters in the successor cycle
    max_hops: int = 4  # hops: training queries ask 1..max_hops hops
    queries: int = 6  # hops: queries per problem
    # A task's stage one starts on its easiest difficulty and adds the next one every this
    # many steps (0: all of them from the start). See TASK_DEFAULTS["hops"] for why.
    curriculum_steps: int = 0
    # hops: stage one trains loop t on the letter t - 1 hops along (hops.loop_targets)
    loop_targets: bool = False
    # A task's stage one, from gate_warmup_steps on: this share of rows has its context
    # stop after a loop drawn from 2..T-1 (best-available KV, as the engine runs it), so
    # the answer learns to read the context's shallower K/V (0: the context runs every loop)
    context_exits: float = 0.0
    out: str = "kernels/models/pydoc-loop"
    work_dir: str = "var/train/pydoc-loop"
    seed: int = 0
    heldout_fraction: float = 0.03
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 704
    # One shared layer: loop 1 is then a one-layer model that cannot copy from context
    # (an induction head needs two layers), so later loops have something to add. With two
    # layers per loop the loops' losses stayed within 0.01 nats of each other.
    num_hidden_layers: int = 1
    num_attention_heads: int = 4
    loops: int = 4
    seq_len: int = 128
    batch_size: int = 16
    stage1_steps: int = 1200
    lr: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta: float = 0.02  # stage one's entropy weight (larger evens out the loops' losses)
    sublayer_norm_init: float = 0.1  # the sandwich's output norms start small (see Run)
    gate_bias_init: float = -3.0  # λ ≈ 0.05 at first: 87% of the stopping mass on loop T
    gate_warmup_steps: int = 600  # stage one keeps that constant gate this many steps
    stage1_gate_lr_scale: float = 0.1  # then the gate moves slower than the LM
    stage2_steps: int = 300
    gate_lr: float = 1e-2
    gain_scale: float = 50.0  # stage two: k in sigmoid(k (I - gamma))
    # stage two: gamma, in nats. Chosen on training windows from the stage-one model's gains
    # (median I_2 = 0.026, I_4 = 0.001 nats): 0.005 kept 72% of tokens at loop 4 at q = 0.7
    # (held-out average depth 3.69); 0.03 spreads them over all four loops.
    gain_margin: float = 0.03
    # stage two: label loop t by the best gain of any later loop, not only the next one
    gain_lookahead: bool = False
    eval_every: int = 100
    eval_windows: int = 64
    eval_length: int = 64
    save_every: int = 50
    # One intra-op thread: on a shared 2-core machine a second thread that loses its core
    # stalls every barrier (measured: 7.6 s/step with 2 threads beside one busy process,
    # 1.3 s/step with 1 thread).
    threads: int = 1
    device: str = "auto"
    evaluate: bool = True

    @property
    def work(self) -> Path:
        return Path(self.work_dir)


# The addition model: bytes, one shared layer looped 6 times (each loop can pass a carry
# on by about one column), answer-only losses.
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "addition": {
        "out": "kernels/models/add-loop",
        "work_dir": "var/train/add-loop",
        "digits": 8,
        "max_chain": 5,
        "hidden_size": 128,
        "intermediate_size": 512,
        "loops": 6,
        "seq_len": 27,  # an 8-digit problem and its answer, less one
        "batch_size": 32,
        "stage1_steps": 3000,
        "warmup_steps": 100,
        "gate_warmup_steps": 1500,
        "stage2_steps": 200,
        "eval_every": 250,
        "save_every": 250,
        "eval_windows": 256,
    },
    # The pointer-chasing model: a hop cannot be looked ahead across, so each needs about
    # a loop; 6 loops for up to 4 hops leave one loop to find the pairs and one to spare.
    # A lookup needs two circuits at once (a head that copies each pair's first letter
    # onto its second, a head that matches the query's letter against it); with hops 1-4
    # mixed from step 0 the answers stayed at chance for 1200 steps (measured), the
    # harder hops adding only noise, so one hop comes first and one more every 400 steps.
    # Trained on the answer alone, loops learnt one hop (at loop 2) but not to hop again
    # (2 hops at chance 1000 steps after they came in, measured): loop t is also trained
    # on the letter t - 1 hops along, and a gate that starts at λ = 0.18 spreads stage
    # one's weight over the loops (0.18, 0.15, 0.12, 0.10, 0.08, 0.37) so each loop's
    # hop is learnt. Stage two's gate labels are the true answer's gains, looking past the
    # next loop: a 4-hop answer is wrong until loop 5, so with next-loop gains alone the
    # gate stopped 4-hop queries early (82.7% at q = 0.7 against 100% at full depth).
    # The prompt's gates were first labelled by the answer's gains at full depth, which
    # kept the prompt running as deep as the deepest answer (5.1 loops on average, 81.9%
    # of full-depth work at q = 0.7); stopping the whole prompt after loop 4 loses nothing
    # (100% at full depth, measured), so stage two labels it by what its exit really costs
    # the answer (objectives.context_exit_losses). Still, the answer read the context's
    # deepest K/V in stage one: stopping the context after loop 3 lost 6.2 points, after
    # loop 2 31 points (answers at full depth). With half of stage one's rows stopping their
    # context early from step 2000 on (context_exits), stopping it after loop 2 loses
    # nothing (measured on the stage-one model), and stage two's labels stop it there.
    # Default q (playground.json) 0.7: on the validation problems (seed -1, 256 problems)
    # the smallest q as right as full depth (q = 0.5 99.5%, 0.7 100% with 37.6% of the
    # full-depth token-loops).
    "hops": {
        "out": "kernels/models/hop-loop",
        "work_dir": "var/train/hop-loop",
        "symbols": 8,
        "max_hops": 4,
        "queries": 6,
        "hidden_size": 128,
        "intermediate_size": 256,
        "loops": 6,
        "seq_len": 53,  # 8 pairs, 6 queries with their answers, less one
        "batch_size": 32,
        "curriculum_steps": 400,
        "loop_targets": True,
        "context_exits": 0.5,
        "gain_lookahead": True,
        "gate_bias_init": -1.5,
        "stage1_steps": 3000,
        "warmup_steps": 100,
        "gate_warmup_steps": 2000,
        "stage2_steps": 800,
        "eval_every": 100,
        "save_every": 100,
        "eval_windows": 256,
    },
}


@dataclass
class Data:
    tokenizer: PreTrainedTokenizerFast | ByteTokenizer
    train: Tensor  # (N,) int64 token stream of the training documents
    heldout: Tensor  # (M,) int64 token stream of the held-out documents
    corpus: dict[str, Any]


def prepare_data(cfg: TrainConfig, docs: list[corpus.Document] | None = None) -> Data:
    """Split the corpus, train (or reuse) the tokenizer, encode both splits (cached).
    A task's problems are generated per batch: its data is the byte tokenizer alone."""
    if cfg.task != "text":
        empty = torch.zeros(0, dtype=torch.long)
        info = tasks.describe(asdict(cfg))
        return Data(ByteTokenizer(256, tasks.EOS), empty, empty, info)
    docs = corpus.documents() if docs is None else docs
    train_docs, heldout_docs = corpus.split(
        docs, seed=cfg.seed, heldout_fraction=cfg.heldout_fraction
    )
    info = {
        **corpus.describe(docs),
        "heldout_sha256": corpus.digest(heldout_docs),
        "train_documents": len(train_docs),
        "heldout_documents": len(heldout_docs),
        "heldout_fraction": cfg.heldout_fraction,
        "split_seed": cfg.seed,
    }
    key = f"{info['sha256']}-{cfg.seed}-{cfg.heldout_fraction}-{cfg.vocab_size}"
    tok_dir, cache = cfg.work / "tokenizer", cfg.work / "tokens.pt"
    if (tok_dir / "tokenizer.json").is_file() and cache.is_file():
        cached = torch.load(cache)
        if cached["key"] == key:
            tokenizer = PreTrainedTokenizerFast.from_pretrained(str(tok_dir))
            return Data(tokenizer, cached["train"], cached["heldout"], info)
    tokenizer = train_bpe((d.text for d in train_docs), cfg.vocab_size)
    eos = tokenizer.eos_token_id
    train_ids = corpus.encode(tokenizer, train_docs, eos)
    heldout_ids = corpus.encode(tokenizer, heldout_docs, eos)
    tok_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(tok_dir))
    torch.save({"key": key, "train": train_ids, "heldout": heldout_ids}, cache)
    return Data(tokenizer, train_ids, heldout_ids, info)


def model_config(
    cfg: TrainConfig, tokenizer: PreTrainedTokenizerFast | ByteTokenizer
) -> LoopConfig:
    eos = tokenizer.eos_token_id
    return LoopConfig(
        vocab_size=tokenizer.vocab_size if isinstance(tokenizer, ByteTokenizer) else len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_attention_heads,
        max_position_embeddings=max(512, cfg.seq_len),
        rope_theta=10_000.0,
        total_ut_steps=cfg.loops,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )


def batch(ids: Tensor, cfg: TrainConfig, stage: int, step: int) -> Tensor:
    """Batch ``step`` of ``stage``: random windows, from (seed, stage, step) alone -> (B, S+1)."""
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + stage * 100_003 + step)
    starts = torch.randint(0, len(ids) - cfg.seq_len - 1, (cfg.batch_size,), generator=g)
    return ids[starts[:, None] + torch.arange(cfg.seq_len + 1)]  # (B, S+1)


def task_batch(cfg: TrainConfig, stage: int, step: int) -> tuple[Tensor, Tensor]:
    """Batch ``step`` of ``stage`` of generated problems, from (seed, stage, step) alone:
    ids (B, S+1) and the answer mask (B, S)."""
    return tasks.encode(_task_problems(cfg, stage, step))


def task_loop_targets(cfg: TrainConfig, stage: int, step: int) -> Tensor | None:
    """Stage one's per-loop targets (T, B, S) of batch ``step`` when ``loop_targets``."""
    if stage != 1 or not cfg.loop_targets:
        return None
    problems = [p for p in _task_problems(cfg, stage, step) if isinstance(p, hops.Problem)]
    return hops.loop_targets(problems, cfg.loops)


def _task_problems(cfg: TrainConfig, stage: int, step: int) -> list[tasks.Problem]:
    seed = cfg.seed * 1_000_003 + stage * 100_003 + step
    levels = tasks.trained_levels(asdict(cfg))
    if stage == 1 and cfg.curriculum_steps:
        levels = levels[: 1 + step // cfg.curriculum_steps]
    return tasks.problems(asdict(cfg), seed, cfg.batch_size, levels)


def validation_set(cfg: TrainConfig, data: Data) -> tuple[Tensor, Tensor | None]:
    """Held-out windows, or for a task problems from a seed no training batch uses."""
    if cfg.task != "text":
        return tasks.batch(asdict(cfg), -1 - cfg.seed, cfg.eval_windows)
    return corpus.windows(data.heldout, cfg.eval_length, cfg.eval_windows), None


@torch.no_grad()
def validate(
    model: LoopedLM, windows: Tensor, q: float = 0.7, mask: Tensor | None = None
) -> dict[str, Any]:
    """Per-loop loss and the Q-exit histogram on held-out windows (compute every loop);
    with a ``mask`` (B, S), over the scored positions only."""
    model.eval()
    out = model(windows[:, :-1])
    losses = per_loop_losses(out.step_logits, windows[:, 1:])  # (T, B, S)
    exit_loop = q_exit(torch.sigmoid(out.gate_logits).movedim(0, -1), q)  # (B, S)
    if mask is not None:
        losses, exit_loop = losses[:, mask][..., None], exit_loop[mask][:, None]  # (T, M, 1)
    hist = torch.bincount(exit_loop.flatten() - 1, minlength=model.config.total_ut_steps)
    model.train()
    return {
        "loss_per_loop": [round(v, 4) for v in losses.mean((1, 2)).tolist()],
        f"exit_histogram_q{q}": [round(v, 4) for v in (hist / hist.sum()).tolist()],
        f"avg_exit_q{q}": round(exit_loop.float().mean().item(), 4),
        f"loss_q{q}": round(losses.gather(0, exit_loop[None] - 1).mean().item(), 4),
    }


def _lr(cfg: TrainConfig, step: int) -> float:
    """Linear warmup, then cosine down to a tenth."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.stage1_steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress))))


def stage1_optimizer(model: LoopedLM, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW; the gate in a slower group of its own (see :class:`Run` for why)."""
    gate = list(model.model.early_exit_gate.parameters())
    ids = {id(p) for p in gate}
    lm = [p for p in model.parameters() if id(p) not in ids]
    groups: list[dict[str, Any]] = [
        {"params": [p for p in lm if p.ndim >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in lm if p.ndim < 2]},
        {"params": gate, "lr_scale": cfg.stage1_gate_lr_scale},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)


def stage2_optimizer(model: LoopedLM, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Freeze the LM: only the exit gate's parameters train (and get gradients)."""
    model.zero_grad(set_to_none=True)  # stage one's last gradients
    model.requires_grad_(False)
    model.model.early_exit_gate.requires_grad_(True)
    return torch.optim.Adam(model.model.early_exit_gate.parameters(), lr=cfg.gate_lr)


def context_exits(cfg: TrainConfig, mask: Tensor, step: int) -> Tensor | None:
    """Stage one's exit loop per position (B, S) of batch ``step``, from (seed, step) alone:
    the answer at full depth, the context of ``context_exits`` of the rows stopping after a
    loop drawn from 2..T-1 (loop 1's K/V are a token's embedding alone: no pair is read
    there). None before ``gate_warmup_steps`` or without ``context_exits``."""
    if not cfg.context_exits or step < cfg.gate_warmup_steps:
        return None
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 7 * 100_003 + step)
    early = torch.rand(len(mask), generator=g) < cfg.context_exits  # (B,)
    loop = torch.randint(2, cfg.loops, (len(mask),), generator=g)  # (B,)
    rows = torch.where(early, loop, cfg.loops).to(mask.device)  # (B,)
    return torch.where(mask, cfg.loops, rows[:, None])  # (B, S)


def stage1_step(
    model: LoopedLM,
    opt: torch.optim.Optimizer,
    tokens: Tensor,
    cfg: TrainConfig,
    step: int,
    mask: Tensor | None = None,
    targets: Tensor | None = None,
) -> float:
    """One step of ``sum_t p_t L_t - beta H(p)``; L_t against ``targets`` (T, B, S) when
    each loop has its own, else against the next tokens; a task's context may stop early
    (:func:`context_exits`)."""
    for group in opt.param_groups:
        group["lr"] = _lr(cfg, step) * group.get("lr_scale", 1.0)
    model.model.early_exit_gate.requires_grad_(step >= cfg.gate_warmup_steps)
    exits = None if mask is None else context_exits(cfg, mask, step)
    out = model(tokens[:, :-1], exits=exits)
    targets = tokens[:, 1:] if targets is None else targets
    losses = per_loop_losses(out.step_logits, targets)  # (T, B, S)
    loss, _ = ponder_loss(losses, out.gate_logits, cfg.beta, mask)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def stage2_step(
    model: LoopedLM,
    opt: torch.optim.Optimizer,
    tokens: Tensor,
    cfg: TrainConfig,
    mask: Tensor | None = None,
) -> float:
    """The LM runs without autograd; its detached per-loop losses label the gate. With a
    ``mask`` the context positions are labelled by what their exit costs the answer
    (:func:`context_exit_losses`): one run per loop the context may stop after."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    with torch.no_grad():
        if mask is None:
            out = model(inputs)
            losses, hidden = per_loop_losses(out.step_logits, targets), out.step_hidden
        else:
            n = model.config.total_ut_steps
            runs = [model(inputs, exits=torch.where(mask, n, k)) for k in range(1, n + 1)]
            losses, exit_loop = context_exit_losses(
                torch.stack([per_loop_losses(r.step_logits, targets) for r in runs]),
                mask,
                cfg.gain_scale,
                cfg.gain_margin,
                cfg.gain_lookahead,
            )  # (T, B, S), (B,)
            rows = torch.arange(len(inputs), device=inputs.device)
            hidden = torch.stack([r.step_hidden for r in runs])[exit_loop - 1, :, rows]
            hidden = hidden.movedim(0, 1)  # (T, B, S, H): the states of that run
    gate_logits = model.model.gate(hidden)  # (T, B, S), grad to the gate only
    loss = gate_loss(gate_logits, losses, cfg.gain_scale, cfg.gain_margin, cfg.gain_lookahead)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


class Run:
    """One training run's mutable state, saved to and restored from ``work/state.pt``."""

    def __init__(self, cfg: TrainConfig, data: Data, device: torch.device) -> None:
        self.cfg, self.data, self.device = cfg, data, device
        torch.manual_seed(cfg.seed)
        self.config = model_config(cfg, data.tokenizer)
        self.model = LoopedLM(self.config).to(device).train()
        # The gate starts constant (zero weights), with most of the mass on the last loop.
        # With the library's zero bias, λ = 0.5 gives p = (.5, .25, .125, .125), and a gate
        # that learns from step 0 follows loop 1, which learns fastest at first: the mass
        # moves to loop 1 and the later loops stay worse (measured: L_1 < L_2 < L_3 < L_4
        # after 60 steps). Kept constant for ``gate_warmup_steps``, the loops learn to
        # refine first; then the gate learns which tokens need them.
        nn.init.zeros_(self.model.model.early_exit_gate.weight)
        nn.init.constant_(self.model.model.early_exit_gate.bias, cfg.gate_bias_init)
        # Ouro's sandwich norms the output of each sublayer before adding it: with unit
        # weights every sublayer writes a unit-RMS vector onto a residual stream that
        # holds a 0.02-RMS embedding, and each extra loop adds four of them. Deeper loops
        # then start as noise and train slower than loop 1 (measured: L_1 < ... < L_4 at
        # step 100 although loop 4 held 68% of the weight). Small output norms make each
        # loop start near the identity on its input, a refinement (LayerScale's idea).
        for layer in self.model.model.decoder_layers:
            nn.init.constant_(layer.input_layernorm_2.weight, cfg.sublayer_norm_init)
            nn.init.constant_(layer.post_attention_layernorm_2.weight, cfg.sublayer_norm_init)
        self.stage, self.step = 1, 0
        self.elapsed = {"stage1_s": 0.0, "stage2_s": 0.0}
        self.cpu = {"stage1_s": 0.0, "stage2_s": 0.0}  # process CPU time, validation included
        self.history: list[dict[str, Any]] = []
        self.opt = stage1_optimizer(self.model, cfg)
        valid, mask = validation_set(cfg, data)
        self.valid = valid.to(device)
        self.valid_mask = None if mask is None else mask.to(device)

    @property
    def state_path(self) -> Path:
        return self.cfg.work / "state.pt"

    def save(self) -> None:
        self.cfg.work.mkdir(parents=True, exist_ok=True)
        state = {
            "stage": self.stage,
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "elapsed": self.elapsed,
            "cpu": self.cpu,
            "history": self.history,
        }
        torch.save(state, self.state_path.with_suffix(".tmp"))
        self.state_path.with_suffix(".tmp").replace(self.state_path)

    def restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.stage, self.step = state["stage"], state["step"]
        self.elapsed, self.history = state["elapsed"], state["history"]
        self.cpu = state.get("cpu", self.cpu)
        if self.stage == 2:
            self.opt = stage2_optimizer(self.model, self.cfg)
        self.opt.load_state_dict(state["optimizer"])

    def restart_stage2(self) -> None:
        """Start stage two again from the model saved when stage one ended."""
        stage1 = torch.load(self.cfg.work / "stage1.pt", map_location=self.device)
        self.model.load_state_dict(stage1["model"])
        self.elapsed = stage1["elapsed"]
        self.cpu = stage1.get("cpu", {"stage1_s": 0.0, "stage2_s": 0.0})
        self.history = [h for h in stage1["history"] if h["stage"] == 1]
        self.stage, self.step = 2, 0
        self.opt = stage2_optimizer(self.model, self.cfg)

    def _log_validation(self) -> None:
        stats = validate(self.model, self.valid, mask=self.valid_mask)
        record = {"stage": self.stage, "step": self.step, **stats}
        self.history.append(record)
        tqdm.write(json.dumps(record))

    def run_stage(self, stage: int, steps: int) -> None:
        cfg, tokens_per_step = self.cfg, cfg_tokens(self.cfg)
        bar = tqdm(total=steps, initial=self.step, desc=f"stage {stage}", dynamic_ncols=True)
        cpu = cpu_seconds()
        while self.step < steps:
            start = time.perf_counter()
            if cfg.task != "text":
                tokens, mask = task_batch(cfg, stage, self.step)
                tokens, mask = tokens.to(self.device), mask.to(self.device)
                targets = task_loop_targets(cfg, stage, self.step)
                targets = None if targets is None else targets.to(self.device)
            else:
                tokens, mask = batch(self.data.train, cfg, stage, self.step).to(self.device), None
                targets = None
            if stage == 1:
                loss = stage1_step(self.model, self.opt, tokens, cfg, self.step, mask, targets)
            else:
                loss = stage2_step(self.model, self.opt, tokens, cfg, mask)
            seconds = time.perf_counter() - start
            self.elapsed[f"stage{stage}_s"] += seconds
            self.step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_per_step / seconds:.0f}")
            if self.step % cfg.eval_every == 0 or self.step == steps:
                self._log_validation()
            self.cpu[f"stage{stage}_s"] += cpu_seconds() - cpu
            cpu = cpu_seconds()
            if self.step % cfg.save_every == 0 or self.step == steps:
                self.save()
        bar.close()


def cpu_seconds() -> float:
    """User + system CPU time of this process: with one thread, what the run would take
    alone on a core, however many other processes share the machine."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cfg_tokens(cfg: TrainConfig) -> int:
    return cfg.batch_size * cfg.seq_len


def train(
    cfg: TrainConfig,
    *,
    resume: bool = False,
    restart_stage2: bool = False,
    docs: list[corpus.Document] | None = None,
) -> Run:
    """Both stages, resumable; returns the run (its model is the trained one).
    ``docs`` replaces the corpus (tests)."""
    torch.set_num_threads(cfg.threads)
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(auto if cfg.device == "auto" else cfg.device)
    start = time.perf_counter()
    data = prepare_data(cfg, docs)
    run = Run(cfg, data, device)
    run.elapsed["data_s"] = time.perf_counter() - start
    if restart_stage2:
        run.restart_stage2()
    elif resume and run.state_path.is_file():
        run.restore(torch.load(run.state_path, map_location=device))
    if run.stage == 1:
        run.run_stage(1, cfg.stage1_steps)
        torch.save({"model": run.model.state_dict(), **_meta(run)}, cfg.work / "stage1.pt")
        run.stage, run.step = 2, 0
        run.opt = stage2_optimizer(run.model, cfg)
        run.save()
    run.run_stage(2, cfg.stage2_steps)
    return run


def _meta(run: Run) -> dict[str, Any]:
    return {"elapsed": dict(run.elapsed), "cpu": dict(run.cpu), "history": list(run.history)}


def save_model(run: Run) -> Path:
    """The checkpoint directory plus ``training.json`` (what the model card reports)."""
    cfg = run.cfg
    out = save_checkpoint(run.model.eval(), run.config, cfg.out, run.data.tokenizer)
    train_s = run.elapsed["stage1_s"] + run.elapsed["stage2_s"]
    tokens = cfg_tokens(cfg) * (cfg.stage1_steps + cfg.stage2_steps)
    summary = {
        "settings": asdict(cfg),
        "corpus": run.data.corpus,
        "train_tokens": len(run.data.train),
        "heldout_tokens": len(run.data.heldout),
        "parameters": sum(p.numel() for p in run.model.parameters()),
        "steps": {"stage1": cfg.stage1_steps, "stage2": cfg.stage2_steps},
        "tokens_seen": tokens,
        "wall_time_s": {k: round(v, 1) for k, v in run.elapsed.items()},
        "stage1_tokens_per_s": round(cfg_tokens(cfg) * cfg.stage1_steps / run.elapsed["stage1_s"]),
        "train_time_s": round(train_s, 1),
        "cpu_time_s": {k: round(v, 1) for k, v in run.cpu.items()},
        "train_cpu_time_s": round(sum(run.cpu.values()), 1),
        "threads": cfg.threads,
        "device": str(run.device),
        "torch": torch.__version__,
        "history": run.history,
    }
    (out / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    return out


def parse_args(argv: list[str] | None = None) -> tuple[TrainConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m kernels.offline.train", description=__doc__)
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            parser.add_argument(flag, type=kind, default=f.default)
    parser.add_argument("--resume", action="store_true", help="continue from work-dir/state.pt")
    parser.add_argument(
        "--restart-stage2", action="store_true", help="rerun stage two from stage1.pt"
    )
    task = parser.parse_known_args(argv)[0].task
    if task not in ("text", *TASK_DEFAULTS):
        parser.error(f"unknown task {task!r}; known: text, {', '.join(TASK_DEFAULTS)}")
    parser.set_defaults(**TASK_DEFAULTS.get(task, {}))
    args = parser.parse_args(argv)
    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)})
    return cfg, args


def main(argv: list[str] | None = None) -> None:
    cfg, args = parse_args(argv)
    wall = time.perf_counter()
    run = train(cfg, resume=args.resume, restart_stage2=args.restart_stage2)
    out = save_model(run)
    print(f"saved {out} after {time.perf_counter() - wall:.0f} s")
    if cfg.evaluate:
        from kernels.offline.evaluate import evaluate_directory

        start = time.perf_counter()
        evaluate_directory(out)
        summary = json.loads((out / "training.json").read_text())
        summary["wall_time_s"]["evaluation_s"] = round(time.perf_counter() - start, 1)
        summary["command_wall_time_s"] = round(time.perf_counter() - wall, 1)
        summary["resumed"] = args.resume or args.restart_stage2
        (out / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
        write_card(out)


if __name__ == "__main__":
    main()
