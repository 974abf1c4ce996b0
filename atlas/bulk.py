"""Works to propose in bulk, read from a curator's BibTeX, TSV or review file
(``propose_works``), and a review file's decisions (``review_proposals``).

Each entry becomes the API's proposal fields, and is then checked by ``proposal_submit``
like any other proposal; nothing here decides what is valid. BibTeX's own fields map to
the API's (``author`` → ``authors``, ``eprint`` → ``arxiv_id``, ``year`` and ``month`` →
``month``, ``journal`` or ``booktitle`` → ``venue``, ``abstract`` → ``summary``; a year without a
month is an estimated January, "not before" it), and any
field named as the API names one (``recurrence_family``, ``modality``, ``rationale``…) is
taken as it is. A TSV's header names the API's fields. In both, list fields separate
values with ``;`` and a boolean is ``yes``/``no``. A review file (YAML, the format of
``atlas/data/README.md``) holds each work's proposal fields beside the decision on it.
"""

import csv
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bibtexparser
import yaml

from atlas.proposals import FIELDS
from atlas.records import LIST_FIELDS, LIST_SEPARATOR

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
BIBTEX_FIELDS = {
    "eprint": "arxiv_id",
    "arxiv": "arxiv_id",
    "journal": "venue",
    "booktitle": "venue",
    "abstract": "summary",
    "code": "code_url",
}
TRUE, FALSE = ("yes", "true", "1"), ("no", "false", "0", "")


@dataclass
class Entry:
    """One entry of the file: where it is, its proposal fields, or why it was unreadable."""

    label: str
    data: dict[str, Any] = field(default_factory=dict)
    unreadable: str = ""


def _typed(name: str, text: str) -> Any:
    """A text cell as the API's JSON value for field ``name``."""
    text = text.strip()
    if name in LIST_FIELDS or name == "authors":
        return [part.strip() for part in text.split(LIST_SEPARATOR) if part.strip()]
    if name == "month_estimated":
        return text.lower() in TRUE if text.lower() in TRUE + FALSE else text
    if name == "evidence":
        try:
            return json.loads(text) if text else {}
        except json.JSONDecodeError:
            return text  # refused by the proposal's check, which says what it must be
    return text or None


def _bibtex_text(value: str) -> str:
    """Braces that protect case or group words go; what they hold stays."""
    return re.sub(r"\s+", " ", value.replace("{", "").replace("}", "")).strip()


def _person(name: str) -> str:
    last, comma, first = name.partition(",")
    return f"{first.strip()} {last.strip()}" if comma else name.strip()


def _bibtex_month(year: str, month: str) -> tuple[str, bool]:
    """``YYYY-MM`` and whether it is estimated: a year alone is "not before January"."""
    month = month.strip().lower()[:3]
    number = MONTHS.index(month) + 1 if month in MONTHS else int(month) if month.isdigit() else 0
    return f"{year.strip()}-{number or 1:02d}", not number


def _failure(error: Exception) -> str:
    reason = getattr(error, "abort_reason", None) or str(error) or type(error).__name__
    return reason.splitlines()[0]


def bibtex_entries(text: str) -> list[Entry]:
    library = bibtexparser.parse_string(text)
    entries = [
        Entry(f"line {(block.start_line or 0) + 1}", unreadable=_failure(block.error))
        for block in library.failed_blocks
    ]
    for item in library.entries:
        values = {f.key.lower(): _bibtex_text(str(f.value)) for f in item.fields}
        year, month = values.pop("year", ""), values.pop("month", "")
        data: dict[str, Any] = {}
        for name, value in values.items():
            target = BIBTEX_FIELDS.get(name, name)
            if target in FIELDS and target not in data:
                data[target] = _typed(target, value)
        if "author" in values:
            data["authors"] = [_person(name) for name in values["author"].split(" and ")]
        if re.fullmatch(r"[0-9]{4}-[0-9]{2}", month):
            data["month"] = month
        elif year:
            data["month"], estimated = _bibtex_month(year, month)
            data.setdefault("month_estimated", estimated)
        entries.append(Entry(f"@{item.entry_type}{{{item.key}}}", data))
    return entries


def tsv_entries(text: str) -> list[Entry]:
    rows = csv.DictReader(io.StringIO(text), delimiter="\t")
    return [
        Entry(
            f"row {number}",
            {name: _typed(name, cell or "") for name, cell in row.items() if name is not None},
        )
        for number, row in enumerate(rows, start=2)
    ]


@dataclass
class Decision:
    """One entry of a review file: the work as proposed, where its facts were checked
    (``source``), and the curator's decision with its public reason."""

    label: str
    source: str
    decision: str
    reason: str
    data: dict[str, Any]


REVIEW_DECISIONS = ("accept", "reject")


def review_decisions(text: str) -> list[Decision]:
    """A review file (a YAML list, one mapping per work): each entry's proposal fields
    (only those; ``source`` becomes ``facts_source``), decision and reason.

    Raises:
        ValueError: not a YAML list of mappings, or an entry without a decision.
    """
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML: {exc}") from exc
    if not isinstance(document, list):
        raise ValueError("a review file is a YAML list of entries")
    decisions = []
    for number, item in enumerate(document, start=1):
        if not isinstance(item, dict) or item.get("decision") not in REVIEW_DECISIONS:
            raise ValueError(f"entry {number}: needs a decision, one of accept, reject")
        source = str(item.get("source") or "")
        data = {name: item[name] for name in FIELDS if name in item and name != "contact"}
        if source:
            data["facts_source"] = source
        label = f"entry {number}" + (f" ({source})" if source else "")
        decisions.append(
            Decision(label, source, item["decision"], str(item.get("reason") or ""), data)
        )
    return decisions


def review_entries(text: str) -> list[Entry]:
    return [Entry(decision.label, decision.data) for decision in review_decisions(text)]


def entries_from_file(path: Path) -> list[Entry]:
    """Entries of a ``.bib`` file (BibTeX), a ``.yaml`` review file or any other (TSV
    with a header row)."""
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    if suffix == ".bib":
        return bibtex_entries(text)
    return review_entries(text) if suffix in (".yaml", ".yml") else tsv_entries(text)
