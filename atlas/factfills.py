"""Facts a public list holds for works already in the atlas (a code link, say), applied
as a contributor's would be: each becomes a suggestion naming the list's entry, which a
curator then approves (``suggest_facts``). A fill already applied is reported, not
suggested again.
"""

import csv
import io
from dataclasses import dataclass

from atlas.models import Suggestion, Work
from atlas.records import RecordError, value_from_text, value_to_text
from atlas.review import Outcome
from atlas.services import (
    ReviewError,
    suggestion_approve,
    suggestion_submit,
    work_field_value,
)

COLUMNS = ("n", "title", "field", "value", "source_repo_path")


@dataclass(frozen=True)
class Fill:
    label: str
    position: int
    title: str
    field: str
    value: str
    source: str


def fills_from_text(text: str) -> list[Fill]:
    """The rows of a fills TSV (columns ``COLUMNS``: the work's position and title, the
    field, its value and the list entry that gives it).

    Raises:
        ValueError: a column is missing or a position is not a number.
    """
    rows = csv.DictReader(io.StringIO(text), delimiter="\t")
    missing = set(COLUMNS) - set(rows.fieldnames or ())
    if missing:
        raise ValueError(f"missing column(s): {', '.join(sorted(missing))}")
    return [
        Fill(
            f"row {number}",
            int(row["n"]),
            row["title"].strip(),
            row["field"].strip(),
            row["value"].strip(),
            row["source_repo_path"].strip(),
        )
        for number, row in enumerate(rows, start=2)
    ]


def fill_apply(fill: Fill, *, reviewer: object) -> Outcome:
    """Suggest the fill and approve it, unless the work already has that value."""
    work = (
        Work.objects.filter(title=fill.title, position=fill.position).first()
        or Work.objects.filter(title=fill.title).first()
    )
    if work is None:
        return Outcome("failed", f"no work titled {fill.title!r}")
    try:
        wanted = value_to_text(value_from_text(fill.field, fill.value))
    except RecordError as exc:
        return Outcome("failed", f"{fill.field}: {exc}")
    if value_to_text(work_field_value(work=work, field=fill.field)) == wanted:
        return Outcome("already", f"{work.slug}: {fill.field} is already {wanted}")
    pending = Suggestion.objects.filter(
        work=work, field=fill.field, proposed_value=wanted, status=Suggestion.Status.PENDING
    ).first()
    try:
        suggestion = pending or suggestion_submit(
            work=work,
            field=fill.field,
            proposed_value=fill.value,
            rationale=f"The public list's entry {fill.source} gives it; checked there.",
            evidence_source=fill.source,
        )
        suggestion_approve(suggestion=suggestion, reviewer=reviewer)
    except (RecordError, ReviewError) as exc:
        return Outcome("failed", str(exc))
    done = f"{work.slug}: {fill.field} → {wanted} (suggestion #{suggestion.pk})"
    return Outcome("approved", done)
