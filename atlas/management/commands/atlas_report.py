from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from atlas.datafile import DEFAULT_PATH, DataFileError, records_from_file
from atlas.report import atlas_coverage


class Command(BaseCommand):
    help = (
        "Coverage of the curated data file: values per facet, the basis of the labels, "
        "works without facts, rule violations (exit status 1 when there is one)."
    )
    # It reads the data file, never the database: it runs on a fresh checkout (CI's lint
    # step), where the system checks would open a database that does not exist yet.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)

    def handle(self, *args: Any, path: Path, **options: Any) -> None:
        try:
            records = records_from_file(path, rules=False)
        except DataFileError as exc:
            raise CommandError(str(exc)) from exc
        report = atlas_coverage(records)
        self.stdout.write("\n".join(report.lines()))
        if report.violations:
            raise CommandError(f"{len(report.violations)} rule violation(s) in {path.name}")
