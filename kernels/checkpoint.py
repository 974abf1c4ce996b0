"""Load and save Ouro-format checkpoint directories.

A directory holds ``config.json``, one or more ``*.safetensors`` files with Ouro's tensor
names and, optionally, ``tokenizer.json``. Loading reads JSON and safetensors only: any
``.py`` a checkpoint ships (its ``auto_map``) is ignored, and nothing touches the network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from kernels.config import LoopConfig, dtype_name
from kernels.model import LoopedLM


class Tokenizer(Protocol):
    """The surface the engine and the workers use; transformers' fast tokenizers have it."""

    eos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...
    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as token ids, for checkpoints without ``tokenizer.json`` (vocab ≥ 256).

    Decoding replaces incomplete UTF-8 sequences with U+FFFD rather than failing.
    """

    def __init__(self, vocab_size: int, eos_token_id: int | None = None) -> None:
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        if ids and max(ids) >= self.vocab_size:
            raise ValueError(
                f"byte-level fallback needs a vocabulary of 256, this model has {self.vocab_size}"
            )
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def save_pretrained(self, path: str | Path) -> None:
        """Nothing to write: the fallback is implied by a missing ``tokenizer.json``."""


@dataclass
class LoadedModel:
    """A model ready for inference, with what a caller needs beside it."""

    model: LoopedLM
    config: LoopConfig
    tokenizer: Tokenizer
    path: Path | None = None

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.lm_head.weight.dtype


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def read_config(path: str | Path) -> LoopConfig:
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{path} has no config.json (is it an Ouro checkpoint directory?)")
    return LoopConfig.from_json(config_file)


def _weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / name for name in names]
    files = sorted(path.glob("*.safetensors"))
    files = [f for f in files if f.name != "reference.safetensors"]  # golden data, not weights
    if not files:
        raise FileNotFoundError(f"{path} has no *.safetensors weights")
    return files


def read_state_dict(path: str | Path, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for file in _weight_files(Path(path)):
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open has no __iter__)
                tensor = handle.get_tensor(name)
                state[name] = tensor.to(dtype) if dtype is not None else tensor
    return state


def load_tokenizer(path: str | Path, config: LoopConfig) -> Tokenizer:
    """transformers' fast tokenizer from ``tokenizer.json`` if present, else UTF-8 bytes."""
    path = Path(path)
    if (path / "tokenizer.json").is_file():
        from transformers import PreTrainedTokenizerFast

        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
        if tokenizer.eos_token_id is None and config.eos_token_id is not None:
            tokenizer.eos_token = tokenizer.convert_ids_to_tokens(config.eos_token_id)
        return tokenizer
    return ByteTokenizer(config.vocab_size, config.eos_token_id)


def build_model(config: LoopConfig, state: dict[str, torch.Tensor]) -> LoopedLM:
    """A LoopedLM holding exactly ``state`` (no random init, no copy of the weights)."""
    with torch.device("meta"):
        model = LoopedLM(config)
    if config.tie_word_embeddings:
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    expected = set(model.state_dict())
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        raise ValueError(
            f"checkpoint does not match the Ouro layout: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )
    model.load_state_dict(state, assign=True, strict=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


def load_checkpoint(
    path: str | Path,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> LoadedModel:
    """Load an Ouro-format directory.

    Args:
        path: directory with config.json, *.safetensors and optionally tokenizer.json.
        device: None picks CUDA when available, else CPU.
        dtype: None keeps the checkpoint's ``dtype``/``torch_dtype`` (float32 or bfloat16).
    """
    path = Path(path)
    config = read_config(path)
    dtype = dtype or config.torch_dtype
    config = config.replace(dtype=dtype_name(dtype))
    model = build_model(config, read_state_dict(path, dtype))
    model.to(device or default_device())
    return LoadedModel(
        model=model, config=config, tokenizer=load_tokenizer(path, config), path=path
    )


def save_checkpoint(
    model: LoopedLM,
    config: LoopConfig,
    path: str | Path,
    tokenizer: Any | None = None,
) -> Path:
    """Write an Ouro-format directory that ``load_checkpoint`` and
    ``AutoModelForCausalLM.from_pretrained`` (after ``import kernels.hf``) both read."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    dtype = model.lm_head.weight.dtype
    values = config.replace(dtype=dtype_name(dtype)).to_dict()
    (path / "config.json").write_text(json.dumps(values, indent=2) + "\n")
    state = {name: t.detach().contiguous().cpu() for name, t in model.state_dict().items()}
    if config.tie_word_embeddings:
        state.pop("lm_head.weight")
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(str(path))
    return path
