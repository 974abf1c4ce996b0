"""The configured checkpoints (``PLAYGROUND_MODELS``), described without loading them.

The web process reads only ``config.json`` (and ``tokenizer.json`` to count prompt
tokens), so it never imports torch; the workers load the weights (``workers.resident``).
A configured directory that is missing or unreadable is listed as unavailable with the
reason, and a submit naming it is refused; it never breaks a page or startup.
"""

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings


@dataclass(frozen=True)
class ModelInfo:
    name: str
    path: Path
    loops: int | None = None  # the trained T (total_ut_steps)
    max_positions: int | None = None
    problem: str = ""  # why it cannot run; empty when available
    summary: str = ""  # the model card's one line (``playground.json``)
    examples: tuple[str, ...] = ()  # prompts that fit the model
    defaults: tuple[tuple[str, object], ...] = ()  # form settings the model asks for
    task: str = "text"  # a task model's task (``kernels.difficulty`` explains its exits)

    @property
    def available(self) -> bool:
        return not self.problem

    @property
    def max_loops(self) -> int | None:
        """The most loops a run may ask for with ``extrapolate`` (2·T)."""
        return None if self.loops is None else 2 * self.loops

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "available": self.available,
            "loops": self.loops,
            "max_loops": self.max_loops,
            "max_positions": self.max_positions,
            "problem": self.problem,
            "summary": self.summary,
            "examples": list(self.examples),
            "defaults": dict(self.defaults),
        }


def model_catalog() -> list[ModelInfo]:
    """Every configured checkpoint, the default (first) one first."""
    return [_describe(name, Path(path)) for name, path in settings.PLAYGROUND_MODELS.items()]


def model_get(*, name: str) -> ModelInfo | None:
    path = settings.PLAYGROUND_MODELS.get(name)
    return None if path is None else _describe(name, Path(path))


def default_model_name() -> str:
    return next(iter(settings.PLAYGROUND_MODELS), "")


def _describe(name: str, path: Path) -> ModelInfo:
    config_file = path / "config.json"
    try:
        stamp = config_file.stat().st_mtime_ns
    except OSError:
        return ModelInfo(name, path, problem=f"the checkpoint directory {path} is missing")
    try:
        loops, positions = _read_config(str(config_file), stamp)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return ModelInfo(name, path, problem=f"{config_file} is not a usable config: {exc}")
    summary, examples, defaults, task = _read_meta(path)
    return ModelInfo(
        name,
        path,
        loops=loops,
        max_positions=positions,
        summary=summary,
        examples=examples,
        defaults=defaults,
        task=task,
    )


# The run settings a model directory may choose defaults for (the form's own validation
# still applies to whatever is submitted).
DEFAULTABLE = ("q", "max_new_tokens", "decoding", "temperature", "top_p", "seed")


def _read_meta(
    path: Path,
) -> tuple[str, tuple[str, ...], tuple[tuple[str, object], ...], str]:
    """The one-line summary, example prompts, default settings and task a model directory
    states in ``playground.json`` (all optional; an unreadable file offers nothing)."""
    try:
        meta = json.loads((path / "playground.json").read_text())
        defaults = meta.get("defaults", {})
        return (
            str(meta.get("summary", "")),
            tuple(str(e) for e in meta.get("examples", ())),
            tuple((k, defaults[k]) for k in DEFAULTABLE if k in defaults),
            str(meta.get("task", "text")),
        )
    except (OSError, ValueError, AttributeError, TypeError):
        return "", (), (), "text"


def model_frontier(*, model: ModelInfo) -> dict | None:
    """The model's stored frontier (``frontier.json``, written by ``python -m
    kernels.offline.frontier``), or None when it has none or it is unreadable."""
    try:
        data = json.loads((model.path / "frontier.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("points"), list) else None


@functools.lru_cache(maxsize=32)
def _read_config(config_file: str, stamp: int) -> tuple[int, int]:
    values = json.loads(Path(config_file).read_text())
    return int(values["total_ut_steps"]), int(values["max_position_embeddings"])


def prompt_token_count(*, model: ModelInfo, text: str) -> int:
    """How many tokens the worker's tokenizer makes of ``text`` (as the engine encodes it)."""
    return len(prompt_encode(model=model, text=text))


def prompt_encode(*, model: ModelInfo, text: str) -> list[int]:
    """The token ids the worker's tokenizer makes of ``text`` (as the engine encodes it)."""
    tokenizer = _model_tokenizer(model)
    if tokenizer is None:
        return list(text.encode("utf-8"))  # kernels.checkpoint.ByteTokenizer
    return list(tokenizer.encode(text).ids)


def tokens_decode(*, model: ModelInfo, ids: list[int]) -> str:
    """The text of ``ids`` as the worker's tokenizer decodes it (special tokens left out,
    as re-encoding adds them back); ``ValueError`` for an id outside the vocabulary."""
    tokenizer = _model_tokenizer(model)
    size = 256 if tokenizer is None else tokenizer.get_vocab_size()
    if any(not 0 <= i < size for i in ids):
        raise ValueError(f"token ids of {model.name} lie in [0, {size})")
    if tokenizer is None:  # kernels.checkpoint.ByteTokenizer's decoding
        return bytes(ids).decode("utf-8", errors="replace")
    return tokenizer.decode(ids, skip_special_tokens=True)


def _model_tokenizer(model: ModelInfo):
    """The model's ``tokenizer.json`` loaded (cached per file version), None for bytes."""
    tokenizer_file = model.path / "tokenizer.json"
    if not tokenizer_file.is_file():
        return None
    return _tokenizer(str(tokenizer_file), tokenizer_file.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _tokenizer(tokenizer_file: str, stamp: int):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(tokenizer_file)
