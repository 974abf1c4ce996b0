"""Everything that writes to the atlas: loading the curated file and reviewed corrections.

Each write that changes what visitors see records an ``AtlasChange``; the newest one
is the data version that exports state and that ETags are derived from.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.db import transaction
from django.utils import timezone

from atlas import taxonomy
from atlas.authors import authors_sync
from atlas.exports import citation_key_base
from atlas.models import TAG_FACETS, AtlasChange, FieldChange, Suggestion, Work, WorkTag
from atlas.records import (
    FIELD_RULES,
    RecordError,
    WorkRecord,
    evidence_source_check,
    value_from_text,
    value_to_text,
)
from atlas.related import related_refresh

# Record fields stored as Work columns (the rest are tags); "n" is stored as ``position``.
COLUMNS: dict[str, str] = {
    name: ("position" if name == "n" else name) for name in FIELD_RULES if name not in TAG_FACETS
}


@dataclass(frozen=True)
class LoadReport:
    created: int
    updated: int
    unchanged: int

    def __str__(self) -> str:
        return f"{self.created} created, {self.updated} updated, {self.unchanged} unchanged"

    def __add__(self, other: "LoadReport") -> "LoadReport":
        return LoadReport(
            self.created + other.created,
            self.updated + other.updated,
            self.unchanged + other.unchanged,
        )


WorkState = dict[str, Any]
WorkChange = tuple[Work, WorkState | None, WorkState]  # (work, before or None if new, after)
ADDED = "work"  # the field name of a FieldChange that records a new work
_FACET_NAMES = frozenset(facet.name for facet in taxonomy.FACETS)


def _plain(value: Any) -> Any:
    return f"{value:%Y-%m}" if isinstance(value, date) else value


def work_state(work: Work) -> WorkState:
    """Every recorded field of a work, as JSON values (months as ``YYYY-MM``)."""
    state = {field: _plain(getattr(work, column)) for field, column in COLUMNS.items()}
    return state | {facet: work.tag_values(facet) for facet in TAG_FACETS}


def _record_state(record: WorkRecord) -> WorkState:
    return {field: _plain(value) for field, value in record.values.items()}


def _field_changes(work: Work, before: WorkState | None, after: WorkState) -> list[FieldChange]:
    """What differs between two states of a work; a new work is one "added" row."""
    if before is None:
        return [FieldChange(work=work, field=ADDED, new=after["title"])]
    evidence = after.get("evidence") or {}
    return [
        FieldChange(
            work=work,
            field=field,
            old=before.get(field),
            new=value,
            evidence=evidence.get(field) if field in _FACET_NAMES else None,
        )
        for field, value in after.items()
        if before.get(field) != value
    ]


def _snapshot() -> list[dict[str, Any]]:
    from atlas.selectors import work_queryset
    from atlas.serializers import WorkSerializer

    rows = WorkSerializer(work_queryset(), many=True).data
    return json.loads(json.dumps(rows, ensure_ascii=False))


def atlas_change_record(
    *,
    kind: AtlasChange.Kind,
    summary: str,
    changes: Iterable[WorkChange] = (),
) -> AtlasChange:
    """Advance the data version: one ``AtlasChange`` with a snapshot of every work (what a
    pinned export serves) and a ``FieldChange`` per changed field of each (work, before,
    after); the authors follow the works' author lists, and the related works are
    recomputed once the change is committed (outside its transaction)."""
    authors_sync()
    transaction.on_commit(related_refresh)
    change = AtlasChange.objects.create(kind=kind, summary=summary[:500], snapshot=_snapshot())
    rows = [row for work, before, after in changes for row in _field_changes(work, before, after)]
    for row in rows:
        row.change = change
    FieldChange.objects.bulk_create(rows, batch_size=1000)
    return change


def _record_columns(record: WorkRecord) -> dict[str, Any]:
    return {column: record.values[name] for name, column in COLUMNS.items()}


def _record_tags(record: WorkRecord) -> set[tuple[str, str]]:
    return {(facet, value) for facet in TAG_FACETS for value in record.values[facet]}


def _work_columns(work: Work) -> dict[str, Any]:
    return {column: getattr(work, column) for column in COLUMNS.values()}


def _work_tags(work: Work) -> set[tuple[str, str]]:
    return set(work.tag_pairs())


def _unique_key(base: str, taken: set[str]) -> str:
    """``base``, else ``base`` + a, b, …, z, aa, ab, … (the first one not taken)."""
    key, n = base, 0
    while key in taken:
        n += 1
        key = base + _letters(n)
    taken.add(key)
    return key


def _letters(n: int) -> str:
    letters = ""
    while n:
        n, rest = divmod(n - 1, 26)
        letters = chr(ord("a") + rest) + letters
    return letters


@transaction.atomic
def atlas_load(
    *,
    records: Iterable[WorkRecord],
    source: str,
    kind: AtlasChange.Kind = AtlasChange.Kind.LOAD,
) -> LoadReport:
    """Upsert checked records by slug; all or nothing, and a no-op when nothing differs.
    A change is recorded as ``kind`` (works accepted through the intake are loaded as
    proposals, so that a fresh install lists them as such)."""
    report, states = works_upsert(records=records)
    if states:
        atlas_change_record(kind=kind, summary=f"Loaded {source}: {report}", changes=states)
    else:
        authors_sync()  # the curated aliases may have changed
        transaction.on_commit(related_refresh)  # a no-op when stored for this version
    return report


def works_upsert(*, records: Iterable[WorkRecord]) -> tuple[LoadReport, list[WorkChange]]:
    """Write checked records by slug and say what changed (for ``atlas_change_record``);
    every new work of the atlas, loaded or accepted from a proposal, is made here.

    New works get a citation key once (oldest first, so the older work keeps the plain
    key when two collide); existing works keep theirs.
    """
    existing = {work.slug: work for work in Work.objects.prefetch_related("tags")}
    taken = {work.citation_key for work in existing.values()}
    created: list[Work] = []
    updated: list[Work] = []
    tags_of: dict[str, set[tuple[str, str]]] = {}
    states: list[WorkChange] = []
    unchanged = 0
    for record in sorted(records, key=lambda r: -r.position):
        columns, tags = _record_columns(record), _record_tags(record)
        work = existing.get(record.slug)
        if work is None:
            key = _unique_key(citation_key_base(**_citation_parts(record)), taken)
            work = Work(**columns, citation_key=key)
            created.append(work)
            states.append((work, None, _record_state(record)))
        elif _work_columns(work) != columns or _work_tags(work) != tags:
            states.append((work, work_state(work), _record_state(record)))
            for column, value in columns.items():
                setattr(work, column, value)
            updated.append(work)
        else:
            unchanged += 1
            continue
        tags_of[record.slug] = tags
    Work.objects.bulk_create(created, batch_size=1000)
    Work.objects.bulk_update(updated, fields=list(COLUMNS.values()), batch_size=1000)
    _tags_replace(works=[*created, *updated], tags_of=tags_of)
    report = LoadReport(created=len(created), updated=len(updated), unchanged=unchanged)
    return report, states


def _citation_parts(record: WorkRecord) -> dict[str, Any]:
    values = record.values
    return {"authors": values["authors"], "year": values["month"].year, "title": values["title"]}


def _tags_replace(*, works: list[Work], tags_of: dict[str, set[tuple[str, str]]]) -> None:
    WorkTag.objects.filter(work__in=[work.pk for work in works]).delete()
    WorkTag.objects.bulk_create(
        [
            WorkTag(work=work, facet=facet, value=value)
            for work in works
            for facet, value in sorted(tags_of[work.slug])
        ],
        batch_size=2000,
    )


def work_field_value(*, work: Work, field: str) -> Any:
    """The current value of one correctable field, in the form ``atlas.records`` checks."""
    if field in TAG_FACETS:
        return work.tag_values(field)
    return getattr(work, field)


def _work_field_set(*, work: Work, field: str, value: Any) -> None:
    if field in TAG_FACETS:
        work.tags.filter(facet=field).delete()
        WorkTag.objects.bulk_create(WorkTag(work=work, facet=field, value=v) for v in value)
    else:
        setattr(work, field, value)


def suggestion_submit(
    *,
    work: Work,
    field: str,
    proposed_value: str,
    rationale: str,
    contact: str = "",
    evidence_note: str = "",
    evidence_source: str = "",
) -> Suggestion:
    """Queue a correction for review once its value (and the source of its evidence, if
    given) passes the field's rules.

    Raises:
        RecordError: the field is not correctable, or the value or source is invalid.
    """
    value = value_from_text(field, proposed_value)
    suggestion = Suggestion(
        work=work,
        field=field,
        proposed_value=value_to_text(value),
        rationale=rationale.strip(),
        contact=contact.strip(),
        evidence_note=evidence_note.strip(),
        evidence_source=evidence_source.strip(),
    )
    if suggestion.evidence_source:
        evidence_source_check(suggestion.evidence_source)
    suggestion.save()
    return suggestion


class ReviewError(ValueError):
    """A review that cannot be applied (already reviewed, or no longer valid)."""


def _pending(suggestion: Suggestion) -> Suggestion:
    locked = Suggestion.objects.select_for_update().select_related("work").get(pk=suggestion.pk)
    if locked.status != Suggestion.Status.PENDING:
        raise ReviewError(f"Suggestion #{locked.pk} was already {locked.get_status_display()}.")
    return locked


@transaction.atomic
def suggestion_approve(*, suggestion: Suggestion, reviewer: Any) -> Suggestion:
    """Apply the proposed value to the work and record who approved it and when."""
    suggestion = _pending(suggestion)
    work = suggestion.work
    try:
        value = value_from_text(suggestion.field, suggestion.proposed_value)
    except RecordError as exc:
        raise ReviewError(f"Suggestion #{suggestion.pk} is no longer valid: {exc}") from exc
    now = timezone.now()
    before = work_state(work)
    suggestion.previous_value = value_to_text(work_field_value(work=work, field=suggestion.field))
    _work_field_set(work=work, field=suggestion.field, value=value)
    if suggestion.field in _FACET_NAMES:
        work.evidence = {**work.evidence, suggestion.field: suggestion_basis(suggestion)}
    work.reviewed_at = now
    work.save()
    suggestion.status = Suggestion.Status.APPROVED
    suggestion.reviewed_by, suggestion.reviewed_at = reviewer, now
    suggestion.save()
    after = work_state(work)
    atlas_change_record(
        kind=AtlasChange.Kind.SUGGESTION,
        summary=f"{work.slug}: {suggestion.field} corrected (suggestion #{suggestion.pk})",
        changes=[(work, before, after)],
    )
    return suggestion


def suggestion_basis(suggestion: Suggestion) -> dict[str, str]:
    """The basis an approved facet value gets: the suggestion's evidence (as the curator
    left it in review), its rationale when it gave no note, the summary when no source."""
    basis = {
        "note": (suggestion.evidence_note or suggestion.rationale).strip()[:500],
        "source": suggestion.evidence_source.strip() or "summary",
    }
    try:
        return FIELD_RULES["evidence"].clean({suggestion.field: basis})[suggestion.field]
    except RecordError as exc:
        raise ReviewError(f"Suggestion #{suggestion.pk}: its evidence {exc}") from exc


@transaction.atomic
def suggestion_reject(*, suggestion: Suggestion, reviewer: Any, note: str = "") -> Suggestion:
    suggestion = _pending(suggestion)
    suggestion.status = Suggestion.Status.REJECTED
    suggestion.reviewed_by, suggestion.reviewed_at = reviewer, timezone.now()
    suggestion.review_note = note
    suggestion.save()
    return suggestion
