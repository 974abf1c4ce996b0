from collections import Counter
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from atlas.factfills import fill_apply, fills_from_text
from atlas.review import curator


class Command(BaseCommand):
    help = (
        "Fill facts of works already in the atlas from a TSV (n, title, field, value, "
        "source_repo_path): each becomes a suggestion citing the list entry, approved by "
        "the reviewer; fills already applied are reported. Fails when one could not be."
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
            fills = fills_from_text(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from exc
        counts: Counter[str] = Counter()
        for fill in fills:
            outcome = fill_apply(fill, reviewer=account)
            counts[outcome.kind] += 1
            self.stdout.write(f"{fill.label}: {outcome.kind}: {outcome.text}")
        self.stdout.write(", ".join(f"{counts[k]} {k}" for k in ("approved", "already", "failed")))
        if counts["failed"]:
            raise CommandError(f"{counts['failed']} fill(s) could not be applied")
