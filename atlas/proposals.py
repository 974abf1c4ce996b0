"""Proposals of new works: checking one, refusing duplicates, accepting or rejecting it.

A proposal is checked by the very code that checks the data file (``atlas.records``'
field rules and ``atlas.rules``' taxonomy rules), so whatever the intake stores, the
loader would load. Accepting one writes the work through ``services.works_upsert`` (as
``load_atlas`` does) and records a new data version. Submissions and acceptances take one
lock (``_intake_serialised``), so two identical proposals sent at once make one proposal
and a refusal, and two acceptances at once never give two works one number or slug.
"""

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.text import slugify

from atlas import taxonomy
from atlas.duplicates import Candidate, Match, matches
from atlas.models import AtlasChange, Proposal, Work
from atlas.records import FIELD_RULES, RecordError, record_from_row, text_rule
from atlas.rules import rule_fields, rules_broken
from atlas.services import ReviewError, atlas_change_record, works_upsert
from loopatlas.locks import transaction_serialised

FACET_NAMES = tuple(facet.name for facet in taxonomy.FACETS)
# A proposal's fields that are a work's own, checked by the work's field rules.
WORK_FIELDS = (
    "title",
    "arxiv_id",
    "url",
    "authors",
    "authors_et_al",
    "month",
    "month_estimated",
    "venue",
    "code_url",
    "summary",
    *FACET_NAMES,
    "topics",
    "evidence",
)
# The proposal's own: where its facts were checked and why it belongs (both public), and
# how to reach the proposer (curators only). The work's source of facts names the first.
OWN_RULES = {
    "facts_source": text_rule(400, optional=True, one_line=True),
    "rationale": text_rule(2000),
    "contact": text_rule(200, optional=True, one_line=True),
}
FIELDS = (*WORK_FIELDS, *OWN_RULES)
REQUIRED = frozenset({"title", "summary", "month", "recurrence_family", "rationale"})
# What a proposer may leave out: the source does not say (single facets) or none apply.
DEFAULTS: dict[str, Any] = {
    facet.name: taxonomy.UNSPECIFIED.slug
    for facet in taxonomy.SINGLE_FACETS
    if taxonomy.UNSPECIFIED.slug in facet.slugs
}
MAX_ITEMS = {"authors": 100, "topics": 20}
SLUG_MAX_LENGTH = 60  # as the data file's slugs (atlas/data/README.md)
RESERVED_SLUGS = frozenset({"propose"})  # /works/propose/ is the form, not a work


class ProposalInvalid(ValueError):
    """The proposal breaks rules; ``errors`` names each field with what it breaks."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))


class ProposalDuplicate(ValueError):
    """The proposal names a work already in the atlas or already proposed."""

    def __init__(self, match: Match) -> None:
        self.match = match
        super().__init__(f"Already there ({match.describe()}).")


def proposal_check(data: Any) -> dict[str, Any]:
    """The proposal's values, checked as a data file row is (plus its own fields): every
    field's bounds and format, at least an arXiv id or a URL, the taxonomy's rules.

    Raises:
        ProposalInvalid: naming each bad field and the rule it breaks.
    """
    if not isinstance(data, Mapping):
        raise ProposalInvalid({"non_field_errors": ["must be an object of proposal fields"]})
    errors: dict[str, list[str]] = {
        str(name)[:50]: [f"unknown field; fields: {', '.join(FIELDS)}"]
        for name in sorted(set(data) - set(FIELDS), key=str)
    }
    values: dict[str, Any] = {}
    rules = {name: FIELD_RULES[name].clean for name in WORK_FIELDS} | OWN_RULES
    for name, clean in rules.items():
        raw = data.get(name)
        if raw is None or raw == "":
            if name in REQUIRED:
                errors[name] = ["is required"]
                continue
            raw = DEFAULTS.get(name, FIELD_RULES[name].default if name in FIELD_RULES else raw)
        try:
            values[name] = clean(raw)
        except RecordError as exc:
            errors[name] = [str(exc)]
            continue
        if name in MAX_ITEMS and len(values[name]) > MAX_ITEMS[name]:
            errors[name] = [f"lists more than {MAX_ITEMS[name]} values"]
    if not errors and not (values["arxiv_id"] or values["url"]):
        errors["url"] = ["give the paper's arXiv id or its URL (at least one is required)"]
    if not errors:
        for rule in rules_broken(values):
            for field in rule_fields(rule, values):
                errors.setdefault(field, []).append(f"breaks rule {rule.name}: {rule.statement}")
    if errors:
        raise ProposalInvalid(errors)
    return values


INTAKE_LOCK = 0x696E7461  # "inta": any number no other code uses


def _intake_serialised() -> None:
    """Make this transaction the only one checking and writing proposals and accepted
    works until it ends: a duplicate check is a read, then an insert."""
    transaction_serialised(INTAKE_LOCK)


def duplicate_candidates(*, exclude: Proposal | None = None) -> list[Candidate]:
    """Every work and every pending proposal (but ``exclude``), to compare a title with."""
    works = Work.objects.order_by("position").values_list("slug", "title", "arxiv_id")
    pending = Proposal.objects.filter(status=Proposal.Status.PENDING).order_by("id")
    if exclude is not None:
        pending = pending.exclude(pk=exclude.pk)
    return [
        *(Candidate("work", slug, title, arxiv, f"/works/{slug}/") for slug, title, arxiv in works),
        *(
            Candidate("proposal", str(pk), title, arxiv, f"/intake/#proposal-{pk}")
            for pk, title, arxiv in pending.values_list("id", "title", "arxiv_id")
        ),
    ]


@transaction.atomic
def proposal_submit(*, data: Any) -> Proposal:
    """Store a checked proposal for review, unless it names a work already there.

    Raises:
        ProposalInvalid: a field breaks its rules.
        ProposalDuplicate: the same arXiv id or (nearly) the same title as a work or a
            pending proposal.
    """
    values = proposal_check(data)
    _intake_serialised()
    found = matches(
        title=values["title"], arxiv_id=values["arxiv_id"], candidates=duplicate_candidates()
    )
    if found:
        raise ProposalDuplicate(found[0])
    return Proposal.objects.create(**values)


def proposal_row(proposal: Proposal, *, n: int, slug: str) -> dict[str, Any]:
    """The proposal as a data file row (what ``record_from_row`` checks); its facts'
    source names where the proposer checked them, and the proposal that brought it."""
    row = {name: getattr(proposal, name) for name in WORK_FIELDS}
    via = f"proposal #{proposal.pk} in the intake log"
    return row | {
        "n": n,
        "slug": slug,
        "month": f"{proposal.month:%Y-%m}",
        "facts_confidence": None,
        "facts_source": f"{proposal.facts_source} (via {via})" if proposal.facts_source else via,
    }


def work_slug(title: str, taken: set[str]) -> str:
    """``slugify(title)`` cut back to the last hyphen within ``SLUG_MAX_LENGTH``, with
    ``-2``, ``-3``… on a collision (the data file's convention)."""
    base = slugify(title) or "work"
    if len(base) > SLUG_MAX_LENGTH:
        base = base[:SLUG_MAX_LENGTH].rsplit("-", 1)[0] or base[:SLUG_MAX_LENGTH]
    slug, n = base, 1
    while slug in taken or slug in RESERVED_SLUGS:
        n += 1
        slug = f"{base}-{n}"
    return slug


def _pending(proposal: Proposal) -> Proposal:
    locked = Proposal.objects.select_for_update().get(pk=proposal.pk)
    if locked.status != Proposal.Status.PENDING:
        raise ReviewError(f"Proposal #{locked.pk} was already {locked.get_status_display()}.")
    return locked


@transaction.atomic
def proposal_accept(*, proposal: Proposal, reviewer: Any, note: str = "") -> Proposal:
    """Add the proposed work (as a curator may have edited it) to the atlas: checked as
    a data file row, numbered after every work there, a new data version.

    Raises:
        ReviewError: already reviewed, no longer valid, or now a duplicate of a work.
    """
    _intake_serialised()
    proposal = _pending(proposal)
    candidates = [c for c in duplicate_candidates(exclude=proposal) if c.kind == "work"]
    found = matches(title=proposal.title, arxiv_id=proposal.arxiv_id, candidates=candidates)
    if found:
        raise ReviewError(f"Proposal #{proposal.pk}: {found[0].describe()}.")
    n = (Work.objects.aggregate(last=Max("position"))["last"] or 0) + 1
    slug = work_slug(proposal.title, set(Work.objects.values_list("slug", flat=True)))
    try:
        record = record_from_row(proposal_row(proposal, n=n, slug=slug))
    except RecordError as exc:
        raise ReviewError(f"Proposal #{proposal.pk} is not a valid work: {exc}") from exc
    broken = rules_broken(record.values)
    if broken:
        names = ", ".join(rule.name for rule in broken)
        raise ReviewError(f"Proposal #{proposal.pk} breaks rule(s) {names}.")
    _, changes = works_upsert(records=[record])
    atlas_change_record(
        kind=AtlasChange.Kind.PROPOSAL,
        summary=f"{slug}: added (proposal #{proposal.pk})",
        changes=changes,
    )
    proposal.work = Work.objects.get(slug=slug)
    return _reviewed(proposal, Proposal.Status.ACCEPTED, reviewer=reviewer, note=note)


@transaction.atomic
def proposal_reject(*, proposal: Proposal, reviewer: Any, note: str) -> Proposal:
    """Turn a proposal down with a public reason (the intake log shows it)."""
    if not note.strip():
        raise ReviewError(f"Proposal #{proposal.pk}: give the public reason for rejecting it.")
    proposal = _pending(proposal)
    return _reviewed(proposal, Proposal.Status.REJECTED, reviewer=reviewer, note=note)


def _reviewed(proposal: Proposal, status: str, *, reviewer: Any, note: str) -> Proposal:
    proposal.status = status
    proposal.reviewed_by, proposal.reviewed_at = reviewer, timezone.now()
    proposal.review_note = note.strip()
    proposal.save()
    return proposal
