"""The shipped model's training text: Python's own standard library, plus the atlas.

What it is, in a fixed order (documents sorted by name):

- ``stdlib/<path>``: the source of every pure-Python module of the running interpreter's
  standard library (code, comments and docstrings), without the test suites, the codec
  tables of ``encodings/``, the generated ``_sysconfigdata`` and ``site-packages``;
- ``pydoc/<topic>``: the reference-manual topics that ``help("topic")`` shows
  (``pydoc_data.topics``), one document per topic;
- ``atlas/<slug>``: the title and summary of each work of ``atlas/data/works.yaml``.

Licence: the standard library and ``pydoc_data`` are distributed under the PSF License
Version 2 (``LICENSE.txt`` beside them), which allows redistribution and derived works;
the atlas summaries are this project's (MIT). How it is obtained: read from the files of
the interpreter that runs the code (``sysconfig``'s ``stdlib`` path), nothing is
downloaded. The text therefore depends on the Python version; :func:`digest` names it,
and the model card records both.

The held-out split is by document (a seeded hash of its name), so no held-out text is
ever seen in training, not even as the tail of a training window. It holds standard-
library text only, which is fixed for a given Python version.
"""

from __future__ import annotations

import ast
import hashlib
import sys
import sysconfig
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import yaml
from torch import Tensor

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

ATLAS_WORKS = Path(__file__).resolve().parents[2] / "atlas" / "data" / "works.yaml"
_SKIPPED_DIRS = {"test", "tests", "idle_test", "site-packages", "encodings", "__pycache__"}


@dataclass(frozen=True)
class Document:
    name: str
    text: str


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_sources(root: Path) -> Iterable[Document]:
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if _SKIPPED_DIRS.intersection(rel.parts[:-1]) or rel.name.startswith("_sysconfigdata"):
            continue
        if rel.parts[0] == "pydoc_data" or rel.parts[0].startswith("config-"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            yield Document(f"stdlib/{rel.as_posix()}", text)


def _pydoc_topics(root: Path) -> Iterable[Document]:
    """The ``topics`` dict of ``pydoc_data/topics.py``, read as a literal (never imported)."""
    source = root / "pydoc_data" / "topics.py"
    if not source.is_file():
        return
    tree = ast.parse(source.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            topics = ast.literal_eval(node.value)
            for name in sorted(topics):
                yield Document(f"pydoc/{name}", topics[name])


def _atlas(works: Path) -> Iterable[Document]:
    if not works.is_file():
        return
    for work in yaml.safe_load(works.read_text(encoding="utf-8"))["works"]:
        yield Document(f"atlas/{work['slug']}", f"{work['title']}\n\n{work['summary']}\n")


def documents(root: Path | None = None, works: Path | None = ATLAS_WORKS) -> list[Document]:
    """Every document of the corpus, sorted by name (see the module docstring)."""
    root = root or stdlib_dir()
    docs = [*_stdlib_sources(root), *_pydoc_topics(root), *(_atlas(works) if works else ())]
    return sorted(docs, key=lambda d: d.name)


def is_heldout(name: str, seed: int, fraction: float) -> bool:
    """A document's split from a seeded hash of its name: stable as the corpus changes.

    Atlas summaries are always training text: they are edited as the atlas is corrected,
    and the held-out text must stay fixed for a model card's numbers to reproduce.
    """
    if name.startswith("atlas/"):
        return False
    h = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < fraction


def split(
    docs: Sequence[Document], *, seed: int, heldout_fraction: float
) -> tuple[list[Document], list[Document]]:
    """(train, held-out) by document, both in corpus order."""
    heldout = [is_heldout(d.name, seed, heldout_fraction) for d in docs]
    return (
        [d for d, h in zip(docs, heldout, strict=True) if not h],
        [d for d, h in zip(docs, heldout, strict=True) if h],
    )


def digest(docs: Sequence[Document]) -> str:
    """sha256 over names and texts: two machines with the same digest train on the same text."""
    h = hashlib.sha256()
    for d in docs:
        h.update(d.name.encode())
        h.update(b"\0")
        h.update(d.text.encode())
        h.update(b"\0")
    return h.hexdigest()


def describe(docs: Sequence[Document]) -> dict[str, object]:
    """What the model card says about the corpus."""
    kinds = Counter(d.name.split("/", 1)[0] for d in docs)
    return {
        "documents": len(docs),
        "characters": sum(len(d.text) for d in docs),
        "documents_by_source": dict(sorted(kinds.items())),
        "python": sys.version.split()[0],
        "sha256": digest(docs),
    }


def encode(
    tokenizer: PreTrainedTokenizerBase, docs: Sequence[Document], eos_token_id: int
) -> Tensor:
    """One id stream: each document's tokens followed by EOS -> (N,) int64."""
    ids = tokenizer([d.text for d in docs], add_special_tokens=False)["input_ids"]
    flat = [token for doc in ids for token in (*doc, eos_token_id)]
    return torch.tensor(flat, dtype=torch.int64)


def windows(ids: Tensor, length: int, count: int) -> Tensor:
    """``count`` non-overlapping windows spread evenly over a stream: (N,) -> (count, length).

    Evenly spread rather than the first ones, so that every kind of document is in them.
    """
    available = len(ids) // length
    if available < count:
        raise ValueError(f"the stream holds {available} windows of {length}, not {count}")
    picks = torch.linspace(0, available - 1, count).round().long()  # (count,)
    return ids[: available * length].view(available, length)[picks]  # (count, length)
