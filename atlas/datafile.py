"""Reading the curated data file (``atlas/data/works.yaml``) into checked records.

Every row is checked before anything is written, and every problem is reported with
the row's position, so one run shows a curator all there is to fix.
"""

from pathlib import Path

import yaml

from atlas.records import RecordError, WorkRecord, record_from_row
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
