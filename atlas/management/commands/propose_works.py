from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from atlas.bulk import entries_from_file
from atlas.proposals import ProposalDuplicate, ProposalInvalid, proposal_submit


class Command(BaseCommand):
    help = (
        "Propose many works at once from a BibTeX file (.bib), a review file (.yaml: its "
        "proposal fields) or a TSV with the API's fields: each entry is checked as the API "
        "checks it, duplicates are skipped, and every entry's outcome is printed."
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
            if entry.unreadable:
                outcome, text = "invalid", f"not read: {entry.unreadable}"
            else:
                if rationale:
                    entry.data.setdefault("rationale", rationale)
                try:
                    proposal = proposal_submit(data=entry.data)
                except ProposalInvalid as exc:
                    outcome, text = "invalid", str(exc)
                except ProposalDuplicate as exc:
                    outcome, text = "duplicate", f"skipped: {exc}"
                else:
                    outcome, text = "proposed", f"proposal #{proposal.pk} {proposal.title}"
            counts[outcome] += 1
            self.stdout.write(f"{entry.label}: {outcome}: {text}")
        self.stdout.write(", ".join(f"{n} {outcome}" for outcome, n in counts.items()))
