"""Executed-work counters and the FLOP model they use: every count of the engine's work is
made here, so prefill, decode and a run's report count alike.

``WorkCount`` is the engine's counter of executed work (the atlas's ``Work`` is a paper).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kernels.config import LoopConfig


@dataclass
class WorkCount:
    """Executed work next to what full depth would have executed for the same tokens."""

    token_loops_executed: int = 0
    token_loops_full: int = 0
    token_layers_executed: int = 0
    head_tokens: int = 0  # LM-head applications (exit logits, convergence, logit lens)
    flops_executed: float = 0.0
    flops_full: float = 0.0
    # self-speculation: drafted tokens verified, of them accepted, verification passes
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    verify_steps: int = 0

    @property
    def executed_fraction(self) -> float:
        return self.token_loops_executed / max(self.token_loops_full, 1)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def __add__(self, other: WorkCount) -> WorkCount:
        return WorkCount(**{k: v + getattr(other, k) for k, v in self.to_dict().items()})


class FlopModel:
    """2 × multiply-adds of what the engine runs: projections, attention, gate, LM head."""

    def __init__(self, config: LoopConfig) -> None:
        h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
        q_dim, kv_dim = config.num_attention_heads * config.head_size, config.kv_dim
        self.layers = config.num_hidden_layers
        self.linear = 2 * (h * q_dim + 2 * h * kv_dim + q_dim * h + 3 * h * i)  # per token-layer
        self.per_key = 4 * q_dim  # q·k and p·v for one key, per layer
        self.kv_projection = 2 * 2 * h * kv_dim  # k and v of one state, per layer
        self.gate = 2 * h
        self.head = 2 * h * v

    def loops(self, n_tokens: int, keys: float) -> float:
        """FLOPs of ``n_tokens`` token-loops whose queries see ``keys`` keys in total."""
        return self.layers * (self.linear * n_tokens + self.per_key * keys) + self.gate * n_tokens

    def count_loops(self, work: WorkCount, n_tokens: int, keys: float) -> None:
        """``n_tokens`` token-loops executed, their queries seeing ``keys`` keys in all."""
        work.token_loops_executed += n_tokens
        work.token_layers_executed += n_tokens * self.layers
        work.flops_executed += self.loops(n_tokens, keys)

    def count_heads(self, work: WorkCount, n_tokens: int) -> None:
        """The LM head run for ``n_tokens`` states (exit logits, convergence, the lens)."""
        work.head_tokens += n_tokens
        work.flops_executed += self.head * n_tokens

    def count_projections(self, work: WorkCount, n_states: int) -> None:
        """recompute-kv: every layer's K/V projection of ``n_states`` frozen exit states."""
        work.flops_executed += self.kv_projection * self.layers * n_states

    def count_full(self, work: WorkCount, n_tokens: int, keys: float, cap: int, heads: int) -> None:
        """What full depth would execute for ``n_tokens`` tokens: ``cap`` loops each, their
        queries seeing ``keys`` keys in all per loop, and ``heads`` LM-head calls each."""
        work.token_loops_full += n_tokens * cap
        work.flops_full += cap * self.loops(n_tokens, keys) + self.head * heads * n_tokens
