"""A review file's decisions applied to the intake (``review_proposals``), as a curator
applies them in the admin: each entry's pending proposal is found, edited to the entry's
fields where they differ, and accepted or rejected with the entry's public reason.

Applying a file twice changes nothing the second time: a proposal already reviewed the
same way is reported, not reviewed again, with the fields in which the entry now differs
from what was reviewed (a reviewed work changes by a suggestion, as any work does).
"""

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model

from atlas.bulk import Decision
from atlas.models import Proposal
from atlas.proposals import ProposalInvalid, proposal_accept, proposal_check, proposal_reject
from atlas.services import ReviewError

STATUS_OF = {"accept": Proposal.Status.ACCEPTED, "reject": Proposal.Status.REJECTED}
OUTCOMES = ("accepted", "rejected", "already", "differs", "not proposed", "failed")


@dataclass(frozen=True)
class Outcome:
    kind: str  # one of OUTCOMES
    text: str


def curator(name: str) -> Any:
    """The reviewing curator's account.

    Raises:
        LookupError: there is none of that name.
    """
    try:
        return get_user_model().objects.get_by_natural_key(name)
    except get_user_model().DoesNotExist:
        raise LookupError(f"no user {name!r}: create the curator's account first") from None


def proposal_from_source(source: object) -> Proposal | None:
    """The latest proposal whose facts came from ``source`` (a review file's entry): a
    review file proposes each entry once, even one it rejected."""
    if not isinstance(source, str) or not source.strip():
        return None
    return Proposal.objects.filter(facts_source=source.strip()).order_by("-id").first()


def proposal_of(decision: Decision) -> Proposal | None:
    """The entry's proposal: the one whose facts come from the entry's source, else with
    its arXiv id, else its title (any case); a pending one before any reviewed one."""
    arxiv_id, title = decision.data.get("arxiv_id"), str(decision.data.get("title") or "")
    lookups = [
        {"facts_source": decision.source} if decision.source else None,
        {"arxiv_id": arxiv_id} if arxiv_id else None,
        {"title__iexact": title.strip()} if title.strip() else None,
    ]
    for lookup in filter(None, lookups):
        found = list(Proposal.objects.filter(**lookup).order_by("-id"))
        if found:
            pending = [p for p in found if p.status == Proposal.Status.PENDING]
            return (pending or found)[0]
    return None


def _differences(proposal: Proposal, values: dict[str, Any]) -> list[str]:
    return [name for name, value in values.items() if getattr(proposal, name) != value]


def _differing(proposal: Proposal, data: dict[str, Any]) -> list[str]:
    """The fields whose checked value in the entry is not the proposal's."""
    try:
        return _differences(proposal, proposal_check(data))
    except ProposalInvalid as exc:
        return sorted(exc.errors)


def _edited(proposal: Proposal, data: dict[str, Any]) -> list[str]:
    """Set the proposal's fields to the entry's checked values; the names of those that
    differed (a curator's edit before acceptance)."""
    values = proposal_check(data)
    changed = _differences(proposal, values)
    for name in changed:
        setattr(proposal, name, values[name])
    if changed:
        proposal.save(update_fields=changed)
    return changed


def decision_apply(decision: Decision, *, reviewer: Any) -> Outcome:
    """Accept or reject the entry's proposal; what happened, for the curator to read."""
    proposal = proposal_of(decision)
    if proposal is None:  # a reject's may have been refused as a duplicate when proposed
        kind = "failed" if decision.decision == "accept" else "not proposed"
        return Outcome(kind, "no proposal of it in the intake log")
    wanted = STATUS_OF[decision.decision]
    if proposal.status == wanted:
        text = f"proposal #{proposal.pk} was already {wanted.label.lower()}"
        changed = _differing(proposal, decision.data)
        if changed:  # a reviewed work changes by a suggestion or a curator's edit, not here
            return Outcome("differs", f"{text}; the file now differs in {', '.join(changed)}")
        return Outcome("already", text)
    if proposal.status != Proposal.Status.PENDING:
        return Outcome(
            "failed",
            f"proposal #{proposal.pk} was {proposal.get_status_display().lower()}, "
            f"the file says {decision.decision}",
        )
    try:
        if decision.decision == "reject":
            proposal_reject(proposal=proposal, reviewer=reviewer, note=decision.reason)
            return Outcome("rejected", f"proposal #{proposal.pk}: {decision.reason}")
        edited = _edited(proposal, decision.data)
        done = proposal_accept(proposal=proposal, reviewer=reviewer, note=decision.reason)
    except (ReviewError, ProposalInvalid) as exc:
        return Outcome("failed", str(exc))
    note = f" (edited: {', '.join(edited)})" if edited else ""
    return Outcome("accepted", f"proposal #{done.pk} → {getattr(done.work, 'slug', '')}{note}")
