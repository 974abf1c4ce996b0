from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from atlas.bulk import Entry, entries_from_file
from atlas.proposals import ProposalDuplicate, ProposalInvalid, proposal_submit
from atlas.review import proposal_from_source


class Command(BaseCommand):
    help = (
        "Propose many works at once from a BibTeX file (.bib), a review file (.yaml: its "
        "proposal fields) or a TSV with the API's fields: each entry is checked as the API "
        "checks it, duplicates (and entries whose source a proposal came from) are "
        "skipped, and every entry's outcome is printed."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument(
            "--rationale", default="", help="Why they belong, for entries that do not say."
        )

    def handle(self, *, path: Path, rationale: str, **options) -> None:
        try:
            entries = entries_from_file(path)
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise CommandError(f"cannot read {path}: {exc}") from exc
        counts = {"proposed": 0, "duplicate": 0, "invalid": 0}
        for entry in entries:
            if rationale:
                entry.data.setdefault("rationale", rationale)
            outcome, text = _outcome(entry)
            counts[outcome] += 1
            self.stdout.write(f"{entry.label}: {outcome}: {text}")
        self.stdout.write(", ".join(f"{n} {outcome}" for outcome, n in counts.items()))


def _outcome(entry: Entry) -> tuple[str, str]:
    """Propose one entry: what happened, and how to say it."""
    if entry.unreadable:
        return "invalid", f"not read: {entry.unreadable}"
    earlier = proposal_from_source(entry.data.get("facts_source"))
    if earlier is not None:
        status = earlier.get_status_display().lower()
        return "duplicate", f"skipped: proposal #{earlier.pk} ({status}) has the same source"
    try:
        proposal = proposal_submit(data=entry.data)
    except ProposalInvalid as exc:
        return "invalid", str(exc)
    except ProposalDuplicate as exc:
        return "duplicate", f"skipped: {exc}"
    return "proposed", f"proposal #{proposal.pk} {proposal.title}"
