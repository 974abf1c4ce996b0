"""The looped LM's configuration, parsed from (and written back to) an Ouro ``config.json``.

Ouro's config is a Qwen2-style config plus ``total_ut_steps`` (the number of loops) and
``early_exit_threshold``. We read it as plain JSON: a checkpoint's ``auto_map`` and its
``.py`` files are never looked at.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def dtype_name(dtype: torch.dtype) -> str:
    """The config.json spelling of a torch dtype (``torch.bfloat16`` -> ``"bfloat16"``)."""
    for name, value in DTYPES.items():
        if value == dtype:
            return name
    raise ValueError(f"unsupported dtype {dtype}; expected one of {', '.join(DTYPES)}")


@dataclass
class LoopConfig:
    """Shape and numerics of an Ouro-compatible looped decoder.

    ``total_ut_steps`` physical passes ("loops") are made over the same
    ``num_hidden_layers`` shared layers. Defaults are the ``ouro-tiny`` fixture's.
    """

    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int | None = 2
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 512
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    total_ut_steps: int = 4
    early_exit_threshold: float = 1.0
    initializer_range: float = 0.02
    bos_token_id: int | None = 0
    eos_token_id: int | None = 0
    pad_token_id: int | None = 0
    dtype: str = "float32"

    # derived in __post_init__
    num_kv_groups: int = field(init=False)

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError("hidden_size must be divisible by num_attention_heads")
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.hidden_act != "silu":
            raise ValueError(f"only hidden_act='silu' is supported, got {self.hidden_act!r}")
        if self.total_ut_steps < 1:
            raise ValueError(f"total_ut_steps must be >= 1, got {self.total_ut_steps}")
        if self.dtype not in DTYPES:
            raise ValueError(
                f"unsupported dtype {self.dtype!r}; expected one of {', '.join(DTYPES)}"
            )
        self.num_kv_groups = self.num_attention_heads // self.num_key_value_heads

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def kv_heads(self) -> int:
        """``num_key_value_heads`` as ``__post_init__`` resolved it (never None)."""
        assert self.num_key_value_heads is not None
        return self.num_key_value_heads

    @property
    def head_size(self) -> int:
        """``head_dim`` as ``__post_init__`` resolved it (never None)."""
        assert self.head_dim is not None
        return self.head_dim

    @property
    def kv_dim(self) -> int:
        """Features of one K (or V) vector of one token in one layer: kv heads × head_dim."""
        return self.kv_heads * self.head_size

    def replace(self, **changes: Any) -> LoopConfig:
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        values.update(changes)
        return LoopConfig(**values)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> LoopConfig:
        """Parse an Ouro ``config.json`` dict; unknown keys (``auto_map``, ...) are ignored.

        Accepts ``dtype`` (new transformers) or ``torch_dtype`` (older checkpoints), and
        ``rope_theta`` at top level or inside transformers 5's ``rope_parameters``.
        Refuses what this engine does not implement instead of silently computing
        something else.
        """
        if raw.get("model_type", "ouro") != "ouro":
            raise ValueError(f"not an Ouro config: model_type={raw.get('model_type')!r}")
        rope = raw.get("rope_parameters") or {}
        scaling = raw.get("rope_scaling")
        for spec in (rope, scaling or {}):
            if spec.get("rope_type", spec.get("type", "default")) != "default":
                raise ValueError(f"rope scaling {spec!r} is not supported (plain RoPE only)")
        if raw.get("use_sliding_window"):
            raise ValueError("sliding-window attention is not supported")
        if raw.get("early_exit_step") is not None:
            raise ValueError("early_exit_step is not supported; use a fixed exit rule instead")
        names = {f.name for f in fields(cls) if f.init}
        values = {k: v for k, v in raw.items() if k in names and k != "dtype"}
        if "rope_theta" in rope and "rope_theta" not in values:
            values["rope_theta"] = rope["rope_theta"]
        dtype = raw.get("dtype") or raw.get("torch_dtype") or "float32"
        values["dtype"] = dtype_name(dtype) if isinstance(dtype, torch.dtype) else dtype
        for key in ("eos_token_id", "bos_token_id", "pad_token_id"):
            if isinstance(values.get(key), list):  # several EOS ids: the first one is ours
                values[key] = values[key][0]
        return cls(**values)

    @classmethod
    def from_json(cls, path: str | Path) -> LoopConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_dict(self) -> dict[str, Any]:
        """The Ouro ``config.json`` fields (without ``auto_map``: we ship no code)."""
        values = {k: v for k, v in asdict(self).items() if k != "num_kv_groups"}
        values.update(
            model_type="ouro",
            architectures=["OuroForCausalLM"],
            rope_scaling=None,
            use_sliding_window=False,
            sliding_window=None,
            max_window_layers=self.num_hidden_layers,
            layer_types=["full_attention"] * self.num_hidden_layers,
            attention_dropout=0.0,
            use_cache=True,
        )
        return dict(sorted(values.items()))


PRESETS: dict[str, LoopConfig] = {
    # the golden fixture's shape (tests/kernels/fixtures/ouro-tiny)
    "ouro-tiny": LoopConfig(),
    # HF ModelTester-style tiny shape for unit tests
    "test-32": LoopConfig(
        vocab_size=99,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        total_ut_steps=2,
    ),
    # the benchmark shape: Ouro's proportions (MHA, SwiGLU width 2.75 H) at hidden 512
    "bench-512": LoopConfig(
        vocab_size=4096,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        total_ut_steps=4,
    ),
    "ouro-1.4b": LoopConfig(
        vocab_size=49152,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=24,
        num_attention_heads=16,
        num_key_value_heads=16,
        head_dim=128,
        max_position_embeddings=65536,
        dtype="bfloat16",
    ),
}
# Ouro-2.6B: Ouro-1.4B's shape with twice the layers
PRESETS["ouro-2.6b"] = PRESETS["ouro-1.4b"].replace(num_hidden_layers=48)


def preset(name: str) -> LoopConfig:
    """A fresh copy of a named preset (``ouro-tiny``, ``test-32``, ``bench-512``,
    ``ouro-1.4b``, ``ouro-2.6b``)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name].replace()
