from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from atlas.datafile import DEFAULT_PATH, DataFileError, records_from_file
from atlas.intakefile import FILE_NAME, decisions_from_file, decisions_load
from atlas.services import atlas_load


class Command(BaseCommand):
    help = (
        "Check the curated atlas data file and load it: upsert by slug, all or nothing; "
        "then the intake log's decisions from intake.yaml beside it, when there is one."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)

    def handle(self, *, path: Path, **options) -> None:
        intake = path.with_name(FILE_NAME)
        try:
            records = records_from_file(path)
            slugs = {record.slug for record in records}
            decisions = decisions_from_file(intake, slugs=slugs) if intake.exists() else None
        except DataFileError as exc:
            raise CommandError(str(exc)) from exc
        with transaction.atomic():
            report = atlas_load(records=records, source=path.name)
            try:
                seeded = decisions_load(decisions) if decisions is not None else None
            except ValueError as exc:
                raise CommandError(f"{intake} was not loaded: {exc}") from exc
        self.stdout.write(f"{path.name}: {len(records)} works, {report}")
        if seeded is not None:
            self.stdout.write(f"{intake.name}: {len(decisions or [])} decisions, {seeded}")
