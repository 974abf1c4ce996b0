"""Authors as entities: a name normalised once into one identity per person.

A work stores its author list as written by its source. The same person is often written
several ways ("Shiwei Liu" and "Shiwei liu", "Padrés" and "Padres", "Ros-Giralt" and
"Ros Giralt", "J. Zico Kolter" and "J Zico Kolter"); ``name_key`` folds case, accents,
hyphens, periods and spacing, and the curated alias file joins what folding cannot
("Jason K. Eshraghian" and "Jason Eshraghian"). Spacing *inside* a name is kept
("Yong Jae Lee" and "Yongjae Lee" are two people in the atlas).

``authors_sync`` keeps the ``Author`` and ``WorkAuthor`` rows in step with every work's
author list; it runs with each recorded change of the atlas and with each load.
"""

import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from django.db import transaction

ALIASES_PATH = Path(__file__).resolve().parent / "data" / "author-aliases.yaml"
_SEPARATORS_RE = re.compile(r"[.\-\u2010\u2011\u2012\u2013\u00b7]")
_NOT_SLUG_RE = re.compile(r"[^a-z0-9]+")
# Letters that Unicode does not decompose into a base letter and an accent.
_LETTERS = str.maketrans({"ł": "l", "ø": "o", "đ": "d", "ß": "ss", "æ": "ae", "œ": "oe", "ı": "i"})


def name_key(name: str) -> str:
    """The folded form two spellings of one name share: no accents, no case, periods and
    hyphens as spaces, single spaces (``"J. Zico  Kolter"`` → ``"j zico kolter"``)."""
    decomposed = unicodedata.normalize("NFKD", name)
    plain = "".join(char for char in decomposed if not unicodedata.combining(char))
    plain = plain.casefold().translate(_LETTERS)
    return " ".join(_SEPARATORS_RE.sub(" ", plain).split())


def name_slug(key: str) -> str:
    """A URL slug of a folded name (ASCII letters and digits joined by hyphens)."""
    ascii_text = unicodedata.normalize("NFKD", key).encode("ascii", "ignore").decode()
    return _NOT_SLUG_RE.sub("-", ascii_text.replace("'", "")).strip("-") or "author"


class AliasFileError(ValueError):
    """The alias file cannot be used; the message says what to fix."""


def aliases_load(path: Path = ALIASES_PATH) -> dict[str, str]:
    """The curated aliases as ``{folded variant: name to show}`` (canonical names too)."""
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    entries = document.get("aliases") or {}
    if not isinstance(entries, dict):
        raise AliasFileError(f"{path}: 'aliases' must map a name to its other spellings")
    aliases: dict[str, str] = {}
    for canonical, variants in entries.items():
        if not isinstance(canonical, str) or not isinstance(variants, list):
            raise AliasFileError(f"{path}: {canonical!r} must map to a list of spellings")
        for spelling in [canonical, *variants]:
            key = name_key(str(spelling))
            if aliases.setdefault(key, canonical) != canonical:
                raise AliasFileError(
                    f"{path}: {spelling!r} is given to both {aliases[key]!r} and {canonical!r}"
                )
    return aliases


@dataclass(frozen=True)
class AuthorIdentity:
    key: str  # the folded canonical name, unique
    slug: str
    name: str  # as shown


def _preferred(spellings: Counter[str]) -> str:
    """The most used spelling; on a tie the one keeping more accents, then more capitals."""

    def rank(name: str) -> tuple[int, int, int, str]:
        accents = sum(not char.isascii() for char in name)
        capitals = sum(char.isupper() for char in name)
        return (-spellings[name], -accents, -capitals, name)

    return min(spellings, key=rank)


def author_identities(
    names: Iterable[str], aliases: Mapping[str, str]
) -> dict[str, AuthorIdentity]:
    """Each written name (one entry per occurrence in a work) → the identity it belongs to.

    Deterministic for the same names: slugs that two identities would share get ``-2``,
    ``-3`` in the order of their keys."""
    spellings: dict[str, Counter[str]] = defaultdict(Counter)
    for name in names:
        key = name_key(name)
        spellings[name_key(aliases[key]) if key in aliases else key][name] += 1
    identities: dict[str, AuthorIdentity] = {}
    taken: set[str] = set()
    for key in sorted(spellings):
        base = name_slug(key)
        slug, n = base, 1
        while slug in taken:
            n += 1
            slug = f"{base}-{n}"
        taken.add(slug)
        identity = AuthorIdentity(
            key=key, slug=slug, name=aliases.get(key) or _preferred(spellings[key])
        )
        for name in spellings[key]:
            identities[name] = identity
    return identities


@transaction.atomic
def authors_sync(*, aliases_path: Path = ALIASES_PATH) -> None:
    """Make the authors and the work–author links say what the works' author lists and
    the alias file say; rows that already do are left alone (a no-op when nothing
    changed, whatever the size of the atlas)."""
    from atlas.models import Author, Work, WorkAuthor

    rows_sync(Work, Author, WorkAuthor, aliases=aliases_load(aliases_path))


def rows_sync(Work: Any, Author: Any, WorkAuthor: Any, *, aliases: Mapping[str, str]) -> None:
    """``authors_sync`` on the given model classes (the migration passes its own)."""
    lists = list(Work.objects.values_list("pk", "authors"))
    identities = author_identities((n for _, names in lists for n in names), aliases)
    wanted = {(i.key, i.slug, i.name) for i in identities.values()}
    have = {(a.key, a.slug, a.name): a.pk for a in Author.objects.all()}
    Author.objects.filter(pk__in=[pk for row, pk in have.items() if row not in wanted]).delete()
    Author.objects.bulk_create(
        [Author(key=key, slug=slug, name=name) for key, slug, name in sorted(wanted - set(have))],
        batch_size=1000,
    )
    author_pk = dict(Author.objects.values_list("key", "pk"))
    links = {
        (work_pk, position, author_pk[identities[name].key], name)
        for work_pk, names in lists
        for position, name in enumerate(names, start=1)
    }
    fields = ("work_id", "position", "author_id", "name")
    existing = {row[1:]: row[0] for row in WorkAuthor.objects.values_list("pk", *fields)}
    WorkAuthor.objects.filter(
        pk__in=[pk for row, pk in existing.items() if row not in links]
    ).delete()
    WorkAuthor.objects.bulk_create(
        [
            WorkAuthor(**dict(zip(fields, row, strict=True)))
            for row in sorted(links - set(existing))
        ],
        batch_size=2000,
    )
