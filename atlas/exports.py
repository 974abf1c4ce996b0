"""Exports of works as JSON, CSV, BibTeX and RIS: one module for the API, Explore and Compare.

Every renderer takes the serialized works (``WorkSerializer`` rows) and the data version
they came from, and states that version in the file itself.
"""

import csv
import io
import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

CSV_COLUMNS = (
    "slug",
    "title",
    "month",
    "month_estimated",
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
)
CSV_LIST_SEPARATOR = ";"
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
_BIBTEX_SPECIALS_RE = re.compile("|".join(map(re.escape, _BIBTEX_SPECIALS)))

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


def _bibtex_escape(text: str) -> str:
    return _BIBTEX_SPECIALS_RE.sub(lambda match: _BIBTEX_SPECIALS[match[0]], text)


def bibtex_entry(row: Row) -> str:
    """One entry: ``@article`` when a venue other than arXiv is known, else ``@misc``; arXiv
    works carry ``eprint``/``archivePrefix``. Text stays UTF-8 (biber and bibtexparser read
    it); only BibTeX's special characters are escaped."""
    year, month = row["month"].split("-")
    venue = row["venue"] if row["venue"] and row["venue"].lower() != "arxiv" else None
    authors = [_bibtex_escape(name) for name in row["authors"]]
    if row["authors_et_al"]:
        authors.append("others")
    fields: list[tuple[str, str]] = [("title", "{" + _bibtex_escape(row["title"]) + "}")]
    if authors:
        fields.append(("author", " and ".join(authors)))
    if venue:
        fields.append(("journal", _bibtex_escape(venue)))
    fields.append(("year", year))
    if row["arxiv_id"]:
        fields += [("eprint", row["arxiv_id"]), ("archivePrefix", "arXiv")]
    if row["url"]:
        fields.append(("url", row["url"]))
    fields.append(("note", f"Loop Atlas: {row['page_url']}"))
    body = "".join(f"  {name} = {{{value}}},\n" for name, value in fields)
    body += f"  month = {MONTHS[int(month) - 1]},\n"
    kind = "article" if venue else "misc"
    return f"@{kind}{{{row['citation_key']},\n{body}}}\n"


def export_bibtex(rows: Sequence[Row], version: str) -> str:
    works = f"{len(rows)} work{'' if len(rows) == 1 else 's'}"
    header = f"@comment{{Loop Atlas export, {works}, data version {version}}}\n\n"
    return header + "\n".join(bibtex_entry(row) for row in rows)


def _ris_record(row: Row, version: str) -> str:
    year, month = row["month"].split("-")
    venue = row["venue"] if row["venue"] and row["venue"].lower() != "arxiv" else None
    lines = [("TY", "JOUR" if venue else "UNPB"), ("ID", row["citation_key"])]
    lines += [("TI", row["title"])]
    lines += [("AU", name) for name in row["authors"]]
    lines += [("PY", year), ("DA", f"{year}/{month}")]
    if venue:
        lines.append(("JO", venue))
    if row["arxiv_id"]:
        lines.append(("AN", f"arXiv:{row['arxiv_id']}"))
    lines += [("UR", url) for url in (row["url"], row["page_url"]) if url]
    lines.append(("AB", row["summary"]))
    lines += [("KW", keyword) for keyword in [row["recurrence_family"], *row["topics"]]]
    lines += [("DB", f"Loop Atlas (data version {version})"), ("ER", "")]
    return "".join(f"{tag}  - {value}\n" for tag, value in lines)


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
    if isinstance(value, list):
        return CSV_LIST_SEPARATOR.join(value)
    if isinstance(value, bool):
        return "true" if value else "false"
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
