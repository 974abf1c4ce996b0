from collections import Counter
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from atlas.bulk import review_decisions
from atlas.review import OUTCOMES, curator, decision_apply


class Command(BaseCommand):
    help = (
        "Apply a review file's decisions to the intake: each entry's proposal (found by its "
        "source, arXiv id or title) is accepted or rejected with the entry's public reason, "
        "as in the admin; proposals already reviewed are reported, and every outcome printed. "
        "Fails when a decision could not be applied."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--reviewer", required=True, help="The curator's user name.")

    def handle(self, *, path: Path, reviewer: str, **options) -> None:
        try:
            account = curator(reviewer)
        except LookupError as exc:
            raise CommandError(str(exc)) from exc
        try:
            decisions = review_decisions(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from exc
        counts: Counter[str] = Counter()
        for decision in decisions:
            outcome = decision_apply(decision, reviewer=account)
            counts[outcome.kind] += 1
            self.stdout.write(f"{decision.label}: {outcome.kind}: {outcome.text}")
        self.stdout.write(", ".join(f"{counts[kind]} {kind}" for kind in OUTCOMES))
        if counts["failed"]:
            raise CommandError(f"{counts['failed']} decision(s) could not be applied")
