"""Runs of eight words, to tell whether a summary copies a public list's description.

A text's shingles are its 8-word windows (lowercase, words = runs of letters and digits);
the lists' descriptions are kept only as a digest of theirs (``DIGEST_PATH``: one
truncated SHA-256 per line, sorted), so the check needs no copy of their text.
"""

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

RUN = 8
DIGEST_PATH = Path(__file__).resolve().parent / "data" / "review" / "description-shingles.txt"


def shingles(text: str) -> set[str]:
    """The text's 8-word runs, each as words joined by one space."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {" ".join(words[i : i + RUN]) for i in range(len(words) - RUN + 1)}


def shingle_hash(shingle: str) -> str:
    return hashlib.sha256(shingle.encode()).hexdigest()[:16]


def digest_text(texts: Iterable[str]) -> str:
    """The digest file of ``texts``: every shingle's hash, sorted, one per line."""
    hashes = {shingle_hash(s) for text in texts for s in shingles(text)}
    return "".join(f"{h}\n" for h in sorted(hashes))


def copied_runs(text: str, digest: set[str]) -> list[str]:
    """The text's 8-word runs whose hash is in ``digest``, in order of appearance."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    runs = (" ".join(words[i : i + RUN]) for i in range(len(words) - RUN + 1))
    return [run for run in runs if shingle_hash(run) in digest]
