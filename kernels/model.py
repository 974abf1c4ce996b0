"""The Ouro-compatible looped decoder: shared layers applied T times.

Module and parameter names follow Ouro's checkpoints (``model.layers.N.self_attn.q_proj``,
``model.early_exit_gate``, ``lm_head`` ...), so a state dict loads as is. The
computation follows ``shared/fixtures/OURO-ARCHITECTURE.md`` §3:

- every loop runs all layers, then ``model.norm``; the *normed* state is the loop's
  output, the next loop's input, the exit gate's input and the LM head's input;
- each layer is a "sandwich": a norm before and after attention and before and after
  the MLP;
- RoPE positions are token positions, never offset by the loop index.

A layer does not own its attention pattern: it is handed an ``attend(q, k, v)``
callable. The reference forward below passes plain causal attention; the engine
passes attention over its depth-indexed KV cache. Both run the same layer code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from kernels.config import LoopConfig

# attend(q, k, v) -> o with q (..., n_heads, d), k/v (..., n_kv_heads, d), o like q
Attend = Callable[[Tensor, Tensor, Tensor], Tensor]


class RMSNorm(nn.Module):
    """Llama-style RMSNorm: statistics in float32, cast back *before* the weight."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Plain (unscaled) RoPE tables, rotate-half form. No buffer: tables are built per call
    from the positions, once per forward, and shared by every layer and every loop."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.theta = theta

    def forward(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """positions (...) int -> cos, sin (..., head_dim) in ``dtype``."""
        d = self.head_dim
        exponent = torch.arange(0, d, 2, dtype=torch.int64, device=positions.device).float() / d
        inv_freq = 1.0 / (self.theta**exponent)  # (d/2,)
        freqs = positions.float()[..., None] * inv_freq  # (..., d/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (..., d)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (..., heads, d); cos/sin (..., d) broadcast over heads."""
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """GQA self-attention projections; the attention pattern itself is ``attend``'s."""

    def __init__(self, config: LoopConfig) -> None:
        super().__init__()
        h, d = config.hidden_size, config.head_size
        self.n_heads, self.n_kv_heads, self.head_dim = (
            config.num_attention_heads,
            config.kv_heads,
            d,
        )
        self.q_proj = nn.Linear(h, self.n_heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.n_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.n_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.n_heads * d, h, bias=False)

    def kv(self, u: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """Post-RoPE keys and values of normed input u (..., H) -> (..., n_kv_heads, d) each."""
        k = self.k_proj(u).unflatten(-1, (self.n_kv_heads, self.head_dim))
        v = self.v_proj(u).unflatten(-1, (self.n_kv_heads, self.head_dim))
        return apply_rotary(k, cos, sin), v

    def forward(self, u: Tensor, cos: Tensor, sin: Tensor, attend: Attend) -> Tensor:
        q = self.q_proj(u).unflatten(-1, (self.n_heads, self.head_dim))  # (..., nh, d)
        k, v = self.kv(u, cos, sin)  # (..., nkv, d)
        o = attend(apply_rotary(q, cos, sin), k, v)  # (..., nh, d)
        return self.o_proj(o.flatten(-2))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(u)) * up(u))."""

    def __init__(self, config: LoopConfig) -> None:
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, u: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(u)) * self.up_proj(u))


class DecoderLayer(nn.Module):
    """One shared layer with Ouro's sandwich norms; x is (..., H) in any leading layout."""

    def __init__(self, config: LoopConfig) -> None:
        super().__init__()
        h, eps = config.hidden_size, config.rms_norm_eps
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = Attention(config)
        self.input_layernorm_2 = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.mlp = MLP(config)
        self.post_attention_layernorm_2 = RMSNorm(h, eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attend: Attend) -> Tensor:
        a = self.self_attn(self.input_layernorm(x), cos, sin, attend)
        x = x + self.input_layernorm_2(a)
        m = self.mlp(self.post_attention_layernorm(x))
        return x + self.post_attention_layernorm_2(m)


class LoopedModel(nn.Module):
    """The body (Ouro's ``model.*`` tensors): embedding, shared layers, per-loop norm, gate."""

    def __init__(self, config: LoopConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.early_exit_gate = nn.Linear(config.hidden_size, 1, bias=True)
        self.rotary_emb = RotaryEmbedding(config.head_size, config.rope_theta)

    @property
    def decoder_layers(self) -> list[DecoderLayer]:
        """The shared layers, typed (iterating an ``nn.ModuleList`` yields bare Modules)."""
        return cast(list[DecoderLayer], list(self.layers))

    def gate(self, h: Tensor) -> Tensor:
        """Raw exit-gate logit of a loop's normed state: h (..., H) -> (...)."""
        return self.early_exit_gate(h).squeeze(-1)


@dataclass
class LoopOutput:
    """Every loop's outputs for every token (the reference's "compute all")."""

    step_hidden: Tensor  # (T, B, S, H) normed state after each loop
    step_logits: Tensor | None  # (T, B, S, V) lm_head of each loop's state
    gate_logits: Tensor  # (T, B, S) raw exit-gate output per loop
    layer_outputs: Tensor | None = None  # (T, L, B, S, H) residual stream after each layer


def positions_from_mask(attention_mask: Tensor) -> Tensor:
    """Token positions that ignore padding on either side: (B, S) 0/1 -> (B, S) int64.

    Left-padded rows then get the same positions (and the same numbers) as unpadded
    ones. Padding slots get position 0; their outputs are never used.
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def padded_causal_attend(attention_mask: Tensor | None) -> Attend:
    """Causal self-attention over (B, S) with padded keys masked out.

    Without padding it is SDPA's fused ``is_causal`` path. With padding a query that
    would see no key at all (a left pad) may see itself, so no row is all -inf.
    """
    mask = None
    if attention_mask is not None and not bool(attention_mask.all()):
        valid = attention_mask.bool()  # (B, S)
        s = valid.shape[-1]
        causal = torch.ones(s, s, dtype=torch.bool, device=valid.device).tril()
        mask = causal & valid[:, None, None, :]  # (B, 1, S, S)
        mask = mask | torch.eye(s, dtype=torch.bool, device=valid.device)

    def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, heads, S, d)
        o = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=True
        )
        return o.transpose(1, 2)  # (B, S, nh, d)

    return attend


class LoopedLM(nn.Module):
    """Body + LM head; ``forward`` is the reference: every loop for every token."""

    def __init__(self, config: LoopConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LoopedModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        """The library-default init Ouro was trained from: N(0, 0.02), unit norms, zero bias."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
            if self.config.pad_token_id is not None:
                with torch.no_grad():
                    module.weight[self.config.pad_token_id].zero_()
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        loops: int | None = None,
        *,
        with_logits: bool = True,
        with_layer_outputs: bool = False,
        exits: Tensor | None = None,
    ) -> LoopOutput:
        """Run ``loops`` (default ``total_ut_steps``) loops over all tokens.

        Args:
            input_ids: (B, S) token ids.
            attention_mask: (B, S) 1 for real tokens, 0 for padding (either side).
            loops: number of loops T; more than trained extrapolates.
            with_logits: also apply the LM head to every loop (T×B×S×V floats).
            with_layer_outputs: also keep the residual stream after every layer.
            exits: (B, S) int, each position's exit loop under best-available KV
                (:func:`run_all_loops`); default every position runs every loop.
        """
        return run_all_loops(
            self.model,
            self.lm_head if with_logits else None,
            input_ids,
            attention_mask,
            loops or self.config.total_ut_steps,
            with_layer_outputs=with_layer_outputs,
            exits=exits,
        )


def run_all_loops(
    body: LoopedModel,
    lm_head: nn.Linear | None,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    n_loops: int,
    *,
    with_layer_outputs: bool = False,
    exits: Tensor | None = None,
) -> LoopOutput:
    """The reference computation (shared by :class:`LoopedLM` and the transformers wrapper).

    With ``exits`` (B, S), a position stops after loop ``exits[b, s]`` as under the
    engine's best-available KV: later loops' queries see the K/V it computed at its exit
    loop (each layer its own), and its state from then on is its exit state. Training
    uses this to see what a position's exit costs the positions that read it.
    """
    if attention_mask is None:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        positions = positions.expand_as(input_ids)
    else:
        positions = positions_from_mask(attention_mask)
    x = body.embed_tokens(input_ids)  # (B, S, H)
    cos, sin = body.rotary_emb(positions, x.dtype)  # (B, S, d)
    attend = padded_causal_attend(attention_mask)
    kept: list[list[Tensor]] = [[] for _ in body.layers]  # per layer: its last k, v
    hidden: list[Tensor] = []
    gates, layer_outputs = [], []
    for t in range(1, n_loops + 1):
        done = None if exits is None else exits < t  # (B, S): exited before loop t
        for layer, kv in zip(body.decoder_layers, kept, strict=True):
            layer_attend = attend if done is None else exited_kv_attend(attend, kv, done)
            x = layer(x, cos, sin, layer_attend)
            if with_layer_outputs:
                layer_outputs.append(x)
        x = body.norm(x)  # the normed state is the next loop's input
        if done is not None and hidden:
            x = torch.where(done[..., None], hidden[-1], x)  # (B, S, H)
        hidden.append(x)
        gates.append(body.gate(x))
    step_hidden = torch.stack(hidden)  # (T, B, S, H)
    return LoopOutput(
        step_hidden=step_hidden,
        step_logits=lm_head(step_hidden) if lm_head is not None else None,
        gate_logits=torch.stack(gates),  # (T, B, S)
        layer_outputs=(
            torch.stack(layer_outputs).unflatten(0, (n_loops, len(body.layers)))
            if with_layer_outputs
            else None
        ),
    )


def exited_kv_attend(attend: Attend, kept: list[Tensor], done: Tensor) -> Attend:
    """``attend`` where the positions ``done`` (B, S) show the K/V in ``kept`` (their
    exit loop's: ``kept`` is refreshed with every call, exited entries staying)."""

    def inner(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if kept:
            frozen = done[..., None, None]  # (B, S, 1, 1) over (B, S, nkv, d)
            k, v = torch.where(frozen, kept[0], k), torch.where(frozen, kept[1], v)
        kept[:] = [k, v]
        return attend(q, k, v)

    return inner
