"""Exports of works as JSON, CSV, BibTeX and RIS: one module for the API, Explore and Compare.

Every renderer takes the serialized works (``WorkSerializer`` rows) and the data version
they came from, and states that version in the file itself.

A value cannot change a file's structure, whatever a curator approved: BibTeX values keep
no line break or unpaired brace (it would close the value early and add a field), RIS
values no line break (it would start a tag or end the record), and a CSV cell
that a spreadsheet would run as a formula is quoted with a leading apostrophe (OWASP's
advice for CSV injection).
"""

import csv
import io
import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from loopatlas.spreadsheet import inert

CSV_COLUMNS = (
    "slug",
    "title",
    "month",
    "month_estimated",
    "month_label",
    "authors",
    "authors_et_al",
    "venue",
    "arxiv_id",
    "url",
    "code_url",
    "recurrence_family",
    "depth_control",
    "depth_granularity",
    "kv_strategy",
    "modality",
    "contribution",
    "training_regime",
    "topics",
    "citation_key",
    "summary",
    "page_url",
    "evidence",
)
CSV_LIST_SEPARATOR = ";"
MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_CONFERENCE_RE = re.compile(r"workshop|conference|proceedings|symposium", re.I)
_ACRONYM_YEAR_RE = re.compile(r"^[A-Za-z]*[A-Z]{2,}[A-Za-z]*\b.*\b(?:19|20)\d{2}\b")  # ICML 2026
_JOURNAL_RE = re.compile(r"journal|transactions|letters|review|\bTMLR\b|\bJMLR\b", re.I)
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_TITLE_STOPWORDS = frozenset({"a", "an", "the", "on", "of", "in", "do", "does", "is", "are"})
_BIBTEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
# BibTeX counts every brace, escaped or not, so a brace without its partner would end the
# value early: it is written as a command instead.
_BIBTEX_LONE_BRACES = {"{": r"\textbraceleft{}", "}": r"\textbraceright{}"}
_BIBTEX_URL_UNSAFE_RE = re.compile(r"[\s{}\\]")  # percent-encoded, which keeps the URL

Row = dict[str, Any]


def _ascii_word(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]", "", folded.lower())


def citation_key_base(*, authors: Sequence[str], year: int, title: str) -> str:
    """``surname + year + first title word`` (``burzio2026deja``); title word first without
    authors. The loader adds a letter when two works would share a key."""
    words = [_ascii_word(word) for word in re.split(r"[\s:/-]+", title)]
    words = [word for word in words if word]
    first = next((word for word in words if word not in _TITLE_STOPWORDS), "work")
    surname = _ascii_word(authors[0].split()[-1]) if authors else ""
    return f"{surname}{year}{first}" if surname else f"{first}{year}"


def month_label(month: str, estimated: bool) -> str:
    """``"Oct 2026"``, or ``"not before Oct 2026"`` for a month the seed's order only bounds."""
    year, number = month.split("-")
    label = f"{MONTH_NAMES[int(number) - 1]} {year}"
    return f"not before {label}" if estimated else label


def venue_kind(venue: str | None) -> str:
    """``preprint`` (none, arXiv or another preprint server), ``conference`` (proceedings
    and workshops), ``journal``, or ``other`` (a blog post, say)."""
    if not venue or venue.lower() == "arxiv" or "preprint" in venue.lower():
        return "preprint"
    if _JOURNAL_RE.search(venue):
        return "journal"
    if _CONFERENCE_RE.search(venue) or _ACRONYM_YEAR_RE.match(venue):
        return "conference"
    return "other"


_VENUE_YEAR_RE = re.compile(r"\b(?:19|20)\d{2}\b")


def cited_date(row: Row) -> tuple[str, str | None]:
    """The year and month (``None``: not given) a citation states.

    A conference or journal paper is cited by its venue's year ("ICLR 2019"), while the
    atlas's month stays the month the preprint first appeared; that month is then given
    only when its year is the venue's. An estimated month is never given."""
    year, month = row["month"].split("-")
    venue_year = None
    if venue_kind(row["venue"]) in ("conference", "journal"):
        venue_year = _VENUE_YEAR_RE.search(row["venue"])
    if venue_year and venue_year[0] != year:
        return venue_year[0], None
    return year, None if row["month_estimated"] else month


def missing_facts(row: Row) -> list[str]:
    """What a work's sources have not given yet, as a citation should say it."""
    missing = [] if row["authors"] else ["authors"]
    if not (row["url"] or row["arxiv_id"]):
        missing.append("links")
    return missing


_BIBTEX_TYPES = {"preprint": "misc", "conference": "inproceedings", "journal": "article"}
_VENUE_FIELDS = {"conference": "booktitle", "journal": "journal", "other": "howpublished"}
_RIS_TYPES = {"preprint": "UNPB", "conference": "CONF", "journal": "JOUR", "other": "ELEC"}
_RIS_VENUE_TAGS = {"conference": "T2", "journal": "JO", "other": "PB"}


def _one_line(text: str) -> str:
    """``text`` with its line breaks (every one ``str.splitlines`` knows) as spaces."""
    return " ".join(text.splitlines())


def _bibtex_escape(text: str) -> str:
    """``text`` as LaTeX typesets it back: specials escaped, lone braces as commands, and
    a hyphen before another kept apart from it (LaTeX makes ``--`` a dash)."""
    text = _one_line(text)
    lone = _unpaired_braces(text)
    return "".join(
        _BIBTEX_LONE_BRACES[char]
        if at in lone
        else "-{}"
        if text.startswith("--", at)
        else _BIBTEX_SPECIALS.get(char, char)
        for at, char in enumerate(text)
    )


def _unpaired_braces(text: str) -> set[int]:
    """The positions of the braces that no other brace closes or opens."""
    opened: list[int] = []
    unpaired: set[int] = set()
    for at, char in enumerate(text):
        if char == "{":
            opened.append(at)
        elif char == "}" and opened:
            opened.pop()
        elif char == "}":
            unpaired.add(at)
    return unpaired | set(opened)


def _bibtex_url(url: str) -> str:
    return _BIBTEX_URL_UNSAFE_RE.sub(lambda match: quote(match[0]), url)


def bibtex_entry(row: Row) -> str:
    """One entry: ``@inproceedings`` (``booktitle``) for proceedings and workshops,
    ``@article`` (``journal``) for journals, else ``@misc`` (``howpublished`` for a venue
    that is not a preprint server); arXiv works carry ``eprint``/``archivePrefix``. An
    estimated month is omitted. Text stays UTF-8 (biber and bibtexparser read it); only
    BibTeX's special characters are escaped. The year and month are ``cited_date``'s; the
    note says which facts are not known yet (never invented)."""
    year, month = cited_date(row)
    kind = venue_kind(row["venue"])
    authors = [_bibtex_escape(name) for name in row["authors"]]
    if row["authors_et_al"]:
        authors.append("others")
    fields: list[tuple[str, str]] = [("title", "{" + _bibtex_escape(row["title"]) + "}")]
    if authors:
        fields.append(("author", " and ".join(authors)))
    if kind in _VENUE_FIELDS:
        fields.append((_VENUE_FIELDS[kind], _bibtex_escape(row["venue"])))
    fields.append(("year", year))
    if row["arxiv_id"]:
        fields += [("eprint", row["arxiv_id"]), ("archivePrefix", "arXiv")]
    if row["url"]:
        fields.append(("url", _bibtex_url(row["url"])))
    note = f"Loop Atlas: {row['page_url']}"
    for what in missing_facts(row):
        note += f"; {what} not known yet"
    fields.append(("note", note))
    body = "".join(f"  {name} = {{{value}}},\n" for name, value in fields)
    if month:
        body += f"  month = {MONTHS[int(month) - 1]},\n"
    return f"@{_BIBTEX_TYPES.get(kind, 'misc')}{{{row['citation_key']},\n{body}}}\n"


def export_bibtex(rows: Sequence[Row], version: str) -> str:
    works = f"{len(rows)} work{'' if len(rows) == 1 else 's'}"
    header = f"@comment{{Loop Atlas export, {works}, data version {version}}}\n\n"
    return header + "\n".join(bibtex_entry(row) for row in rows)


def _ris_record(row: Row, version: str) -> str:
    year, month = cited_date(row)
    kind = venue_kind(row["venue"])
    lines = [("TY", _RIS_TYPES[kind]), ("ID", row["citation_key"])]
    lines += [("TI", row["title"])]
    lines += [("AU", name) for name in row["authors"]]
    lines.append(("PY", year))
    if month:
        lines.append(("DA", f"{year}/{month}"))
    if kind in _RIS_VENUE_TAGS:
        lines.append((_RIS_VENUE_TAGS[kind], row["venue"]))
    if row["arxiv_id"]:
        lines.append(("AN", f"arXiv:{row['arxiv_id']}"))
    lines += [("UR", url) for url in (row["url"], row["page_url"]) if url]
    lines.append(("AB", row["summary"]))
    lines += [("KW", keyword) for keyword in [row["recurrence_family"], *row["topics"]]]
    lines += [("DB", f"Loop Atlas (data version {version})"), ("ER", "")]
    return "".join(f"{tag}  - {_one_line(value)}\n" for tag, value in lines)


def export_ris(rows: Sequence[Row], version: str) -> str:
    return "\n".join(_ris_record(row, version) for row in rows)


def export_csv(rows: Sequence[Row], version: str) -> str:
    """One row per work; list fields joined with ``;``. The version is in the filename."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({column: _csv_cell(row[column]) for column in CSV_COLUMNS})
    return out.getvalue()


def _csv_cell(value: Any) -> Any:
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True) if value else ""
    if isinstance(value, list):
        return inert(CSV_LIST_SEPARATOR.join(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return inert(value)
    return "" if value is None else value


def export_json(rows: Sequence[Row], version: str) -> str:
    document = {"data_version": version, "count": len(rows), "works": list(rows)}
    return json.dumps(document, ensure_ascii=False, indent=2)


@dataclass(frozen=True)
class ExportFormat:
    name: str
    label: str
    media_type: str
    extension: str
    render: Callable[[Sequence[Row], str], str]


EXPORT_FORMATS: dict[str, ExportFormat] = {
    fmt.name: fmt
    for fmt in (
        ExportFormat("csv", "CSV", "text/csv", "csv", export_csv),
        ExportFormat("bibtex", "BibTeX", "application/x-bibtex", "bib", export_bibtex),
        ExportFormat("ris", "RIS", "application/x-research-info-systems", "ris", export_ris),
        ExportFormat("json", "JSON", "application/json", "json", export_json),
    )
}


def export_filename(fmt: ExportFormat, version: str) -> str:
    return f"loop-atlas-{version[:10]}.{fmt.extension}"
