"""A slow, obviously correct per-token implementation of the engine's semantics.

One token at a time, one loop at a time, one layer at a time, plain softmax attention
over an explicit dict of K/V entries. A token at loop t sees an earlier token j through
``seen(j, t, layer)``, which is the KV policy written out:

- select: j's own loop-t K/V (every token computes every loop);
- best-available: j's K/V from loop min(t, e_j), where e_j is j's exit loop;
- recompute-kv: j's loop-t K/V if t <= e_j, else j's frozen exit state through the
  layer's K/V projections;
- exit-kv: j's loop-e_j K/V at every loop;
- first-loop-kv: j's loop-1 K/V at every loop, and the token sees itself at loop 1 too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from kernels.model import LoopedLM
from kernels.rules import ACT, Convergence, ExitRule, Ponder, QExit, halting_uniform


@dataclass
class NaiveToken:
    exit_loop: int
    loops_computed: int
    logits: torch.Tensor  # (V,) at the exit loop


@dataclass
class NaiveRun:
    model: LoopedLM
    rule: ExitRule
    policy: str
    n_loops: int
    seed: int = 0
    kv: dict = field(default_factory=dict)  # (j, t, layer) -> (k, v), each (nkv, d)
    frozen: dict = field(default_factory=dict)  # (j, layer) -> (k, v)
    depth: list = field(default_factory=list)  # compute depth of each position
    tokens: list = field(default_factory=list)

    def seen(self, j: int, t: int, layer: int):
        if self.policy == "select":
            return self.kv[(j, t, layer)]
        if self.policy == "best-available":
            return self.kv[(j, min(t, self.depth[j]), layer)]
        if self.policy == "exit-kv":
            return self.kv[(j, self.depth[j], layer)]
        if self.policy == "first-loop-kv":
            return self.kv[(j, 1, layer)]
        assert self.policy == "recompute-kv"
        return self.kv[(j, t, layer)] if t <= self.depth[j] else self.frozen[(j, layer)]

    @torch.no_grad()
    def push(self, token_id: int) -> NaiveToken:
        """Run one more token (at the next position) through its loops."""
        body, i = self.model.model, len(self.tokens)
        self.tokens.append(token_id)
        x = body.embed_tokens.weight[token_id][None]  # (1, H)
        cos, sin = body.rotary_emb(torch.tensor([i]), x.dtype)  # (1, d)
        remaining, cumulative, gate_sum, prev_logp = 1.0, 0.0, 0.0, None
        exit_loop, exit_logits = 0, None
        for t in range(1, self.n_loops + 1):
            for layer_index, layer in enumerate(body.layers):

                def attend(q, k, v, t=t, layer_index=layer_index):  # (1, heads, d)
                    self.kv[(i, t, layer_index)] = (k[0], v[0])
                    own = self.kv[(i, 1 if self.policy == "first-loop-kv" else t, layer_index)]
                    entries = [self.seen(j, t, layer_index) for j in range(i)] + [own]
                    keys = torch.stack([e[0] for e in entries])  # (n, nkv, d)
                    values = torch.stack([e[1] for e in entries])
                    group = q.shape[1] // keys.shape[1]
                    keys = keys.repeat_interleave(group, dim=1)  # (n, nh, d)
                    values = values.repeat_interleave(group, dim=1)
                    scores = torch.einsum("hd,nhd->hn", q[0], keys) / q.shape[-1] ** 0.5
                    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
                    return torch.einsum("hn,nhd->hd", probs, values)[None]

                x = layer(x, cos, sin, attend)
            h = body.norm(x)
            lam = float(torch.sigmoid(body.gate(h).float()))
            gate_sum += lam
            last = t == self.n_loops
            p = remaining if last else remaining * lam
            remaining = 0.0 if last else remaining * (1 - lam)
            cumulative += p
            logits = self.model.lm_head(h)[0]
            logp = F.log_softmax(logits.float(), dim=-1)
            kl = None
            if prev_logp is not None:
                kl = float((prev_logp.exp() * (prev_logp - logp)).sum())
            prev_logp = logp
            draw = float(halting_uniform(*torch.tensor([[self.seed], [i], [t]])))
            signals = (cumulative, kl, lam, gate_sum, draw)
            if not exit_loop and _exits(self.rule, t, self.n_loops, *signals):
                exit_loop, exit_logits = t, logits
                if self.policy != "select":
                    break
            x = h
        self.depth.append(t)
        if self.policy == "recompute-kv" and t < self.n_loops:
            for layer_index, layer in enumerate(body.decoder_layers):
                k, v = layer.self_attn.kv(layer.input_layernorm(h), cos, sin)
                self.frozen[(i, layer_index)] = (k[0], v[0])
        assert exit_logits is not None  # the last loop always exits
        return NaiveToken(exit_loop=exit_loop, loops_computed=t, logits=exit_logits)


def _exits(
    rule: ExitRule,
    t: int,
    n_loops: int,
    cumulative: float,
    kl: float | None,
    lam: float,
    gate_sum: float,
    draw: float,
) -> bool:
    if t >= n_loops:
        return True
    if isinstance(rule, Ponder):
        return draw < lam
    if isinstance(rule, ACT):
        return gate_sum >= 1 - rule.eps
    if isinstance(rule, QExit):
        return rule.q < 1.0 and cumulative >= rule.q
    if isinstance(rule, Convergence):
        return kl is not None and kl < rule.kl_threshold
    return t >= rule.loops


def naive_generate(
    model: LoopedLM,
    rule: ExitRule,
    policy: str,
    prompt: list[int],
    new_tokens: int,
    n_loops: int,
    seed: int = 0,
) -> tuple[list[int], list[NaiveToken]]:
    """Greedy: every prompt token, then ``new_tokens`` generated ones (the last one run too)."""
    run = NaiveRun(model, rule, policy, n_loops, seed=seed)
    out = [run.push(token) for token in prompt]
    ids = list(prompt)
    for _ in range(new_tokens):
        ids.append(int(out[-1].logits.argmax()))
        out.append(run.push(ids[-1]))
    return ids, out
