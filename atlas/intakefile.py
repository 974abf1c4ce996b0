"""The intake's decisions as a data file (``atlas/data/intake.yaml``), beside the works:
``dump_atlas`` writes every reviewed proposal (accepted or rejected, when, and the public
reason; never the contact), ``load_atlas`` seeds them, so a fresh install shows the same
intake log as the atlas it was dumped from.

A proposal keeps its number (``id``): the accepted work's source of facts and its data
version name it. Each entry is checked by the proposal's own rules before anything is
written, and every problem is reported with the entry's number.
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from django.core.management.color import no_style
from django.db import connection, transaction

from atlas.datafile import DataFileError, entry_text
from atlas.models import AtlasChange, Proposal, Work
from atlas.proposals import FIELDS, ProposalInvalid, proposal_check
from atlas.records import WorkRecord
from atlas.services import LoadReport, atlas_load

FILE_NAME = "intake.yaml"
DECIDED = {"accepted": Proposal.Status.ACCEPTED, "rejected": Proposal.Status.REJECTED}
PROPOSAL_FIELDS = tuple(name for name in FIELDS if name not in ("contact", "evidence"))
DECISION_FIELDS = ("id", "status", "submitted_at", "reviewed_at", "reason", "work")
FILE_FIELDS = (*DECISION_FIELDS, *PROPOSAL_FIELDS)  # then its evidence, as a work's
HEADER = """\
# The intake log's decisions: every reviewed proposal of a work, accepted (with the work
# it became) or rejected (with the curator's public reason), oldest first. Written by
# `manage.py dump_atlas` beside works.yaml and seeded by `manage.py load_atlas`; the
# fields are the proposal API's (atlas/data/README.md), never the proposer's contact.
"""
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Decided:
    """One checked entry: the proposal's own values and its review."""

    id: int
    status: str
    submitted_at: datetime
    reviewed_at: datetime
    reason: str
    work: str  # the accepted work's slug, or "" for a rejected proposal
    values: dict[str, Any]


def _time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a time such as 2026-12-06T05:50:00+00:00")
    found = datetime.fromisoformat(value)
    if found.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone")
    return found


def _decided(row: Any) -> Decided:
    if not isinstance(row, dict):
        raise ValueError("must be a mapping of field names to values")
    unknown = sorted(set(row) - {*FILE_FIELDS, "evidence"}, key=str)
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(map(str, unknown))}")
    number, status = row.get("id"), row.get("status")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"id must be a whole number from 1, not {number!r}")
    if status not in DECIDED:
        raise ValueError(f"status must be one of {', '.join(DECIDED)}, not {status!r}")
    reason, work = str(row.get("reason") or "").strip(), str(row.get("work") or "")
    if status == "rejected" and not reason:
        raise ValueError("a rejected proposal needs its public reason")
    if (status == "accepted") != bool(work):
        raise ValueError("an accepted proposal names its work, and only an accepted one")
    try:
        values = proposal_check({name: row.get(name) for name in (*PROPOSAL_FIELDS, "evidence")})
    except ProposalInvalid as exc:
        raise ValueError(str(exc)) from None
    submitted, reviewed = _time(row.get("submitted_at")), _time(row.get("reviewed_at"))
    return Decided(number, DECIDED[status], submitted, reviewed, reason, work, values)


def decisions_from_file(path: Path, *, slugs: set[str]) -> list[Decided]:
    """Check every entry (its work one of ``slugs``); raise ``DataFileError`` naming
    each bad entry, or return them all."""
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except OSError as exc:
        raise DataFileError(path, [f"cannot read the file: {exc.strerror}"]) from exc
    except yaml.YAMLError as exc:
        raise DataFileError(path, [f"not valid YAML: {exc}"]) from exc
    if not isinstance(document, dict) or not isinstance(document.get("proposals"), list):
        raise DataFileError(path, ["the file must be a mapping with a 'proposals' list"])
    problems: list[str] = []
    found: list[Decided] = []
    for index, row in enumerate(document["proposals"], start=1):
        where = f"entry {index}" + (f" (id={row['id']})" if isinstance(row, dict) else "")
        try:
            decided = _decided(row)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if decided.work and decided.work not in slugs:
            problems.append(f"{where}: work {decided.work!r} is not in the atlas")
        if any(other.id == decided.id for other in found):
            problems.append(f"{where}: id {decided.id} is used twice")
        found.append(decided)
    if problems:
        raise DataFileError(path, problems)
    return found


@transaction.atomic
def atlas_with_intake_load(
    *, records: list[WorkRecord], decisions: list[Decided], source: str
) -> tuple[LoadReport, str]:
    """Load the works, then seed the intake log: the works accepted through the intake
    are loaded apart, one data version per day of review, so that the changes list them
    as the intake's additions; the rest as one version of the data file."""
    by_day: dict[str, set[str]] = {}
    for decided in sorted(decisions, key=lambda d: (d.reviewed_at, d.id)):
        if decided.work:
            by_day.setdefault(f"{decided.reviewed_at:%Y-%m-%d}", set()).add(decided.work)
    from_intake = set().union(*by_day.values())
    report = atlas_load(records=[r for r in records if r.slug not in from_intake], source=source)
    for day, slugs in by_day.items():
        report += atlas_load(
            records=[record for record in records if record.slug in slugs],
            source=f"{source}, the works the intake accepted on {day}",
            kind=AtlasChange.Kind.PROPOSAL,
        )
    return report, decisions_load(decisions)


def _columns(decided: Decided, works: dict[str, Work]) -> dict[str, Any]:
    return decided.values | {
        "status": decided.status,
        "reviewed_at": decided.reviewed_at,
        "review_note": decided.reason,
        "work": works.get(decided.work),
    }


def decisions_load(decisions: list[Decided]) -> str:
    """Write the decisions into the intake log under their own numbers (the database's
    numbering then continues after them); what it did, in words.

    Raises:
        ValueError: a number is another proposal's in this database.
    """
    works = {work.slug: work for work in Work.objects.filter(slug__in=[d.work for d in decisions])}
    existing = Proposal.objects.in_bulk([d.id for d in decisions])
    created: list[Proposal] = []
    updated = unchanged = 0
    for decided in decisions:
        columns = _columns(decided, works)
        proposal = existing.get(decided.id)
        if proposal is None:
            created.append(Proposal(id=decided.id, **columns))
            continue
        if (proposal.title, proposal.arxiv_id) != (columns["title"], columns["arxiv_id"]):
            raise ValueError(f"proposal #{decided.id} here is another work's: {proposal.title}")
        if any(getattr(proposal, name) != value for name, value in columns.items()):
            for name, value in columns.items():
                setattr(proposal, name, value)
            proposal.save()
            updated += 1
        else:
            unchanged += 1
    Proposal.objects.bulk_create(created, batch_size=500)
    submitted = {d.id: d.submitted_at for d in decisions}
    for proposal in created:  # auto_now_add set "now" on creation
        proposal.created_at = submitted[proposal.pk]
    Proposal.objects.bulk_update(created, ["created_at"], batch_size=500)
    with connection.cursor() as cursor:
        for statement in connection.ops.sequence_reset_sql(no_style(), [Proposal]):
            cursor.execute(statement)
    return f"{len(created)} created, {updated} updated, {unchanged} unchanged"


def _time_text(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def proposal_entry(proposal: Proposal) -> dict[str, Any]:
    """A reviewed proposal as the file writes it."""
    row = {name: getattr(proposal, name) for name in (*PROPOSAL_FIELDS, "evidence")}
    return row | {
        "id": proposal.pk,
        "status": proposal.status,
        "submitted_at": _time_text(proposal.created_at),
        "reviewed_at": _time_text(proposal.reviewed_at or proposal.created_at),
        "reason": proposal.review_note,
        "work": proposal.work.slug if proposal.work else None,
        "month": f"{proposal.month:%Y-%m}",
    }


def intake_text() -> str:
    """Every reviewed proposal, by number: the same log always gives the same bytes."""
    reviewed = Proposal.objects.exclude(status=Proposal.Status.PENDING).select_related("work")
    body = "".join(
        entry_text(proposal_entry(proposal), FILE_FIELDS) for proposal in reviewed.order_by("id")
    )
    return f"{HEADER}proposals:\n{body}" if body else f"{HEADER}proposals: []\n"
