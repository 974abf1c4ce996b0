"""transformers integration: ``model_type: "ouro"`` without ``trust_remote_code``.

Importing this module registers :class:`OuroConfig` with ``AutoConfig`` and
:class:`OuroForCausalLM` with ``AutoModelForCausalLM``, so::

    import kernels.hf  # noqa: F401
    AutoModelForCausalLM.from_pretrained(local_dir)

loads an Ouro checkpoint with our own classes. transformers prefers a registered local
class over a config's ``auto_map``, so the checkpoint's ``.py`` files are never imported.

The wrapper computes what the reference ``OuroForCausalLM`` returns: every loop runs,
and the logits are selected per token by ``early_exit_threshold`` (1.0: the last loop);
with labels, the loss is cross-entropy of the exit-probability-weighted logits, as in the
reference. It keeps no KV cache (``generate`` recomputes the prefix), and it does not
skip loops: the skipping engine is :mod:`kernels.engine`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    GenerationMixin,
    PreTrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_outputs import CausalLMOutputWithPast

from kernels import exits
from kernels.config import LoopConfig, dtype_name
from kernels.model import LoopedModel, run_all_loops


class OuroConfig(PreTrainedConfig):
    """Ouro's config.json fields (a Qwen2-style config plus the loop fields)."""

    model_type = "ouro"
    keys_to_ignore_at_inference = ["past_key_values"]

    vocab_size: int = 49152
    hidden_size: int = 2048
    intermediate_size: int = 5632
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 65536
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    use_cache: bool = False
    tie_word_embeddings: bool = False
    rope_theta: float = 1_000_000.0
    rope_scaling: dict[str, Any] | None = None
    use_sliding_window: bool = False
    sliding_window: int | None = None
    max_window_layers: int | None = None
    layer_types: list[str] | None = None
    attention_dropout: float = 0.0
    total_ut_steps: int = 4
    early_exit_threshold: float = 1.0
    pad_token_id: int | None = 0
    bos_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 0

    def to_loop_config(self) -> LoopConfig:
        values = self.to_dict()
        dtype = self.dtype if self.dtype is not None else torch.float32
        values["dtype"] = dtype_name(dtype) if isinstance(dtype, torch.dtype) else dtype
        return LoopConfig.from_dict(values)


class OuroPreTrainedModel(PreTrainedModel):
    config_class = OuroConfig
    base_model_prefix = "model"
    _no_split_modules = ["DecoderLayer"]
    _supports_sdpa = True


class OuroForCausalLM(OuroPreTrainedModel, GenerationMixin):
    """Ouro's tensor layout (``model.*`` and ``lm_head``) around our looped body."""

    def __init__(self, config: OuroConfig) -> None:
        super().__init__(config)
        self.loop_config = config.to_loop_config()
        self.model = LoopedModel(self.loop_config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def prepare_inputs_for_generation(  # type: ignore[override]  # no cache arguments to take
        self, input_ids: Tensor, attention_mask: Tensor | None = None, **_: Any
    ) -> dict[str, Any]:
        """No KV cache here: every generation step sees the whole sequence."""
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        exit_threshold: float | None = None,
        **_: Any,  # generate()'s cache and position arguments: we recompute the prefix
    ) -> CausalLMOutputWithPast:
        out = run_all_loops(
            self.model, self.lm_head, input_ids, attention_mask, self.loop_config.total_ut_steps
        )
        step_logits = out.step_logits  # (T, B, S, V)
        assert step_logits is not None  # run_all_loops was given the LM head
        lam = torch.sigmoid(out.gate_logits).movedim(0, -1)  # (B, S, T)
        if labels is not None:
            pdf = exits.stopping_distribution(lam).to(step_logits.dtype)  # (B, S, T)
            logits = torch.einsum("bst,tbsv->bsv", pdf, step_logits)
            loss = F.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
            )
            return CausalLMOutputWithPast(loss=loss, logits=logits)
        q = exit_threshold if exit_threshold is not None else self.config.early_exit_threshold
        steps = exits.q_exit(lam, q) - 1  # (B, S) 0-based
        index = steps[None, :, :, None].expand(1, *step_logits.shape[1:])
        logits = step_logits.gather(0, index).squeeze(0)  # (B, S, V)
        return CausalLMOutputWithPast(logits=logits)


AutoConfig.register(OuroConfig.model_type, OuroConfig, exist_ok=True)
AutoModelForCausalLM.register(OuroConfig, OuroForCausalLM, exist_ok=True)
