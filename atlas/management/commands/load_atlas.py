from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from atlas.datafile import DEFAULT_PATH, DataFileError, records_from_file
from atlas.intakefile import FILE_NAME, atlas_with_intake_load, decisions_from_file


class Command(BaseCommand):
    help = (
        "Check the curated atlas data file and load it: upsert by slug, all or nothing; "
        "with the intake log's decisions from intake.yaml beside it, when there is one."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)

    def handle(self, *, path: Path, **options) -> None:
        intake = path.with_name(FILE_NAME)
        try:
            records = records_from_file(path)
            slugs = {record.slug for record in records}
            decisions = decisions_from_file(intake, slugs=slugs) if intake.exists() else []
            report, seeded = atlas_with_intake_load(
                records=records, decisions=decisions, source=path.name
            )
        except DataFileError as exc:
            raise CommandError(str(exc)) from exc
        except ValueError as exc:  # a decision's number is another proposal's here
            raise CommandError(f"{intake} was not loaded: {exc}") from exc
        self.stdout.write(f"{path.name}: {len(records)} works, {report}")
        if intake.exists():
            self.stdout.write(f"{intake.name}: {len(decisions)} decisions, {seeded}")
