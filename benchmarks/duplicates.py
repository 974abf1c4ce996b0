"""What the duplicate check catches and misses on the atlas's own titles.

    python -m benchmarks.duplicates

Each title of the curated atlas is altered the ways a proposer retypes a title (case,
punctuation, a plural, a typo, a dropped subtitle, reordered words…); each variant is
checked against the whole atlas as a proposal would be. Refused: it matches its own
work; another work: it matches a work it is not; shown: the admin lists its work among
the possible duplicates (the looser check a curator sees). Pairs of distinct works that
match are listed too. Deterministic (a fixed seed); no database.
"""

import itertools
import random
import re
from collections.abc import Callable

import yaml

from atlas.datafile import DEFAULT_PATH
from atlas.duplicates import (
    POSSIBLE_DUPLICATE_RATIO,
    Candidate,
    matches,
    title_key,
    title_similarity,
)


def _typo(title: str, rng: random.Random) -> str:
    letters = [i for i, c in enumerate(title) if c.isalpha()]
    i = rng.choice(letters)
    return title[:i] + ("x" if title[i] != "x" else "y") + title[i + 1 :]


def _plural(title: str, rng: random.Random) -> str:
    return title[:-1] if title.endswith("s") else title + "s"


def _swap(title: str, rng: random.Random) -> str:
    words = title.split()
    if len(words) < 2:
        return title
    i = rng.randrange(len(words) - 1)
    words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


VARIANTS: dict[str, Callable[[str, random.Random], str]] = {
    "lower case": lambda t, r: t.lower(),
    "no punctuation": lambda t, r: re.sub(r"[^\w\s]", " ", t),
    "plural/singular at the end": _plural,
    "one typo": _typo,
    "two typos": lambda t, r: _typo(_typo(t, r), r),
    "two words swapped": _swap,
    "subtitle dropped": lambda t, r: t.split(":")[0] if ":" in t else t,
    "leading 'The ' added": lambda t, r: "The " + t,
}


def main() -> None:
    rng = random.Random(2026)
    rows = yaml.safe_load(DEFAULT_PATH.read_text(encoding="utf-8"))["works"]
    candidates = [Candidate("work", row["slug"], row["title"], "", "") for row in rows]
    print(f"{len(rows)} titles of the atlas, each altered; checked against all of them")
    for name, alter in VARIANTS.items():
        caught = wrong = unchanged = shown = 0
        for row in rows:
            variant = alter(row["title"], rng)
            if variant == row["title"]:
                unchanged += 1
                continue
            found = {
                m.candidate.ident
                for m in matches(title=variant, arxiv_id="", candidates=candidates)
            }
            caught += row["slug"] in found
            wrong += bool(found - {row["slug"]})
            looser = matches(
                title=variant,
                arxiv_id="",
                candidates=candidates,
                ratio=POSSIBLE_DUPLICATE_RATIO,
                main_titles=True,
            )
            shown += row["slug"] in {m.candidate.ident for m in looser}
        tried = len(rows) - unchanged
        print(
            f"{name:>26}: refused {caught}/{tried} ({caught / tried:.0%}), another work "
            f"{wrong}; shown to the curator {shown}/{tried} ({shown / tried:.0%})"
        )
    pairs = [
        (a["title"], b["title"], title_similarity(title_key(a["title"]), title_key(b["title"])))
        for a, b in itertools.combinations(rows, 2)
    ]
    print("closest distinct works:")
    for a, b, score in sorted(pairs, key=lambda pair: -pair[2])[:3]:
        print(f"  {score:5.1f}  {a!r} / {b!r}")


if __name__ == "__main__":
    main()
