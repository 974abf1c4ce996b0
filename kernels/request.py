"""A generation request: its settings, validated, and its prompt, encoded.

``GenerationParams`` is ``kernels.params.RunParams`` (the fields, defaults and bounds the
web process validates with, torch-free) plus what needs torch: the exit rule object and
the sampler. ``encode_request`` checks a request against the model it runs on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from kernels.checkpoint import LoadedModel
from kernels.params import RunParams
from kernels.rules import ACT, Convergence, ExitRule, Fixed, Ponder, QExit, kv_policy
from kernels.sampling import Sampler


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
    loops = params.loops or loaded.config.total_ut_steps
    if params.speculate_loops >= loops:
        raise ValueError(
            f"speculate_loops must be below the run's {loops} loops, got {params.speculate_loops}"
        )
    limit = loaded.config.max_position_embeddings
    if len(prompt) + params.max_new_tokens > limit:
        raise ValueError(
            f"prompt ({len(prompt)} tokens) + max_new_tokens ({params.max_new_tokens}) "
            f"exceeds the model's {limit} positions"
        )
    return prompt


def end_token(loaded: LoadedModel) -> int | None:
    eos = getattr(loaded.tokenizer, "eos_token_id", None)
    return eos if eos is not None else loaded.config.eos_token_id
