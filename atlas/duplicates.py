"""When two titles or arXiv ids name the same work (a proposal's duplicate check).

Titles are compared normalised: accents folded, case folded, every run of other
characters than letters and digits made one space. Two titles match when they are then
equal, or when RapidFuzz's ``ratio`` (normalised Indel similarity, 0–100) reaches
``NEAR_TITLE_RATIO`` and they hold the same numbers: "Part I" and "Part II" differ by
one character yet are two works, so titles that differ in a number (digits or a roman
numeral) never match. The threshold sits above the closest pair of distinct works in the
atlas ("Looped Uniform Diffusion Language Models" / "Looped Diffusion Language Models",
88.9) and below a changed word ending, a typo or a dropped article in a long title.
An arXiv id matches whatever its version suffix.
"""

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from rapidfuzz.distance import Indel

NEAR_TITLE_RATIO = 92.0
POSSIBLE_DUPLICATE_RATIO = 75.0  # looser: what the admin shows a curator beside a proposal
# Whole words that are numbers: digits, or roman numerals up to xxxix ("Part IV").
_NUMBER_RE = re.compile(r"^(?:[0-9]+|x{0,3}(?:ix|iv|v?i{0,3}))$")
_VERSION_RE = re.compile(r"v[0-9]+$")


def title_key(title: str) -> str:
    """The title as compared: ``"Part I: Topology…"`` → ``"part i topology"``."""
    folded = unicodedata.normalize("NFKD", title)
    folded = "".join(char for char in folded if not unicodedata.combining(char)).casefold()
    return " ".join(re.findall(r"[^\W_]+", folded))


def arxiv_key(arxiv_id: str) -> str:
    """An arXiv id without its version: ``2406.01234v2`` → ``2406.01234``."""
    return _VERSION_RE.sub("", arxiv_id.strip())


def _numbers(key: str) -> Counter[str]:
    return Counter(word for word in key.split() if _NUMBER_RE.match(word))


def title_similarity(a: str, b: str) -> float:
    """How alike two normalised titles are, 0–100; 0 when their numbers differ."""
    if _numbers(a) != _numbers(b):
        return 0.0
    return Indel.normalized_similarity(a, b) * 100


@dataclass(frozen=True)
class Candidate:
    """An existing work or pending proposal a new one is compared with."""

    kind: str  # "work" or "proposal"
    ident: str  # the work's slug or the proposal's number
    title: str
    arxiv_id: str
    url: str


@dataclass(frozen=True)
class Match:
    candidate: Candidate
    reason: str

    def describe(self) -> str:
        what = "work " if self.candidate.kind == "work" else "pending proposal #"
        return f"{self.reason}: {what}{self.candidate.ident} “{self.candidate.title}”"


def _main_title_key(title: str) -> str:
    return title_key(title.split(":", 1)[0])


def matches(
    *,
    title: str,
    arxiv_id: str,
    candidates: list[Candidate],
    ratio: float = NEAR_TITLE_RATIO,
    main_titles: bool = False,
) -> list[Match]:
    """The candidates that name the same work, best reason first (same arXiv id, same
    title, near title). What a curator should look at is wider: a lower ``ratio``, and
    with ``main_titles`` the same title before the colon ("Universal Transformers" and
    "Universal Transformers: …"), which a proposer who drops the subtitle would type."""
    key, arxiv = title_key(title), arxiv_key(arxiv_id)
    main = _main_title_key(title)
    found: list[tuple[int, float, Match]] = []
    for candidate in candidates:
        other = title_key(candidate.title)
        if arxiv and arxiv_key(candidate.arxiv_id) == arxiv:
            found.append((0, 100.0, Match(candidate, f"same arXiv id {arxiv}")))
        elif other == key:
            found.append((1, 100.0, Match(candidate, "same title")))
        elif (similarity := title_similarity(key, other)) >= ratio:
            alike = "near-identical" if similarity >= NEAR_TITLE_RATIO else "similar"
            reason = f"{alike} title ({similarity:.0f}% alike)"
            found.append((2, -similarity, Match(candidate, reason)))
        elif main_titles and _main_title_key(candidate.title) == main:
            found.append((3, 0.0, Match(candidate, "same title before the colon")))
    return [match for *_, match in sorted(found, key=lambda item: item[:2])]
