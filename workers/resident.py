"""Models resident in a worker process: each checkpoint is loaded once and kept warm.

A worker takes one generation at a time (prefetch 1, concurrency 1 per GPU), so the
cache is a plain dict guarded by a lock; it is keyed by the resolved directory, and a
checkpoint rewritten in place (a newer ``config.json`` or weights) is loaded again.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernels.checkpoint import LoadedModel

_LOCK = threading.Lock()
_RESIDENT: dict[Path, tuple[float, LoadedModel]] = {}


def _stamp(path: Path) -> float:
    files = [path / "config.json", *path.glob("*.safetensors")]
    return max(file.stat().st_mtime for file in files if file.exists())


def resident_model(path: str | Path) -> LoadedModel:
    """The loaded checkpoint at ``path`` (CUDA when present, else CPU), loading it once."""
    from kernels.checkpoint import load_checkpoint

    key = Path(path).resolve()
    stamp = _stamp(key)
    with _LOCK:
        held = _RESIDENT.get(key)
        if held is None or held[0] != stamp:
            _RESIDENT[key] = (stamp, load_checkpoint(key))
        return _RESIDENT[key][1]


def resident_paths() -> list[Path]:
    return list(_RESIDENT)


def resident_clear() -> None:
    with _LOCK:
        _RESIDENT.clear()
