"""The curated data file (``atlas/data/works.yaml``): reading it into checked records, and
writing the atlas back in its format (``dump_atlas``).

Every row is checked before anything is written, and every problem is reported with
the row's position, so one run shows a curator all there is to fix.
"""

import json
from pathlib import Path
from typing import Any

import yaml

from atlas import taxonomy
from atlas.records import EVIDENCE_KEYS, FIELD_RULES, RecordError, WorkRecord, record_from_row
from atlas.rules import rules_broken

DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "works.yaml"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DataFileError(Exception):
    """The file cannot be loaded; ``problems`` lists each reason with its row."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{path} was not loaded:\n  " + "\n  ".join(problems))


def _rows(path: Path) -> list:
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except OSError as exc:
        raise DataFileError(path, [f"cannot read the file: {exc.strerror}"]) from exc
    except yaml.YAMLError as exc:
        raise DataFileError(path, [f"not valid YAML: {exc}"]) from exc
    if not isinstance(document, dict) or not isinstance(document.get("works"), list):
        raise DataFileError(path, ["the file must be a mapping with a 'works' list"])
    return document["works"]


def _where(index: int, row: object) -> str:
    known = [f"{k}={row[k]}" for k in ("n", "slug") if isinstance(row, dict) and k in row]
    return f"row {index}" + (f" ({', '.join(known)})" if known else "")


def records_from_file(path: Path, *, rules: bool = True) -> list[WorkRecord]:
    """Check every row and (unless ``rules`` is false) the taxonomy's rules; raise
    ``DataFileError`` naming every bad row (and the rule it breaks), or return them all."""
    problems: list[str] = []
    records: list[WorkRecord] = []
    first_row: dict[tuple[str, object], int] = {}  # (field, value): the row using it first
    for index, row in enumerate(_rows(path), start=1):
        try:
            record = record_from_row(row)
        except RecordError as exc:
            problems.append(f"{_where(index, row)}: {exc}")
            continue
        for key in ("slug", "n"):
            seen = first_row.setdefault((key, record.values[key]), index)
            if seen != index:
                problems.append(f"{_where(index, row)}: {key} is already used by row {seen}")
        for name in record.values["short_names"]:
            seen = first_row.setdefault(("short name", name), index)
            if seen != index:
                problems.append(f"{_where(index, row)}: short name {name!r} is row {seen}'s")
        for rule in rules_broken(record.values) if rules else []:
            problems.append(f"{_where(index, row)}: breaks rule {rule.name}: {rule.statement}")
        records.append(record)
    if problems:
        raise DataFileError(path, problems)
    return records


# The data file's field order: a work's facts, then single- and multi-valued facets.
FILE_FIELDS = (
    *(name for name in FIELD_RULES if name not in {*taxonomy.FACETS_BY_NAME, "topics", "evidence"}),
    *(facet.name for facet in taxonomy.SINGLE_FACETS),
    *(facet.name for facet in taxonomy.MULTI_FACETS),
    "topics",
)
PLAIN_FIELDS = frozenset(
    {"n", "slug", "facts_confidence", *taxonomy.FACETS_BY_NAME, "topics", "id", "status", "work"}
)


def _scalar(value: Any, *, plain: bool) -> str:
    if value is None or value == "":
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or plain:
        return str(value)
    return json.dumps(value, ensure_ascii=False)  # a YAML double-quoted scalar


def _value(name: str, value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(item, plain=name in PLAIN_FIELDS) for item in value) + "]"
    return _scalar(value, plain=name in PLAIN_FIELDS)


def row_text(row: dict[str, Any]) -> str:
    """One work as the data file writes it (``row`` as ``services.work_state`` gives it)."""
    return entry_text(row, FILE_FIELDS)


def entry_text(row: dict[str, Any], fields: tuple[str, ...]) -> str:
    """One mapping of a data file's list: ``fields`` in order, then its evidence."""
    first, *rest = fields
    lines = [f"- {first}: {_value(first, row[first])}"]
    lines += [f"  {name}: {_value(name, row[name])}" for name in rest]
    evidence = row.get("evidence") or {}
    if evidence:  # facets and keys in the vocabulary's order (PostgreSQL's jsonb keeps none)
        lines.append("  evidence:")
        for facet in (facet.name for facet in taxonomy.FACETS if facet.name in evidence):
            lines.append(f"    {facet}:")
            basis = evidence[facet]
            lines += [
                f"      {key}: {_scalar(basis[key], plain=False)}"
                for key in EVIDENCE_KEYS
                if key in basis
            ]
    return "\n".join(lines) + "\n"


def file_header(path: Path) -> str:
    """The comment block that opens a data file (kept when the file is written again)."""
    source = path if path.exists() else DEFAULT_PATH
    header = []
    for line in source.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith("works:"):
            break
        header.append(line)
    return "".join(header)


def file_text(rows: list[dict[str, Any]], *, header: str) -> str:
    """The data file holding ``rows`` (in order of ``n``): the same rows always give the
    same bytes, so a dump after accepting a work differs only by that work."""
    body = "".join(row_text(row) for row in sorted(rows, key=lambda row: row["n"]))
    return f"{header}works:\n{body}"
