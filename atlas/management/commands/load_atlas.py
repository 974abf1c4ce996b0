from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from atlas.datafile import DEFAULT_PATH, DataFileError, records_from_file
from atlas.services import atlas_load


class Command(BaseCommand):
    help = "Check the curated atlas data file and load it: upsert by slug, all or nothing."

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)

    def handle(self, *, path: Path, **options) -> None:
        try:
            records = records_from_file(path)
        except DataFileError as exc:
            raise CommandError(str(exc)) from exc
        report = atlas_load(records=records, source=path.name)
        self.stdout.write(f"{path.name}: {len(records)} works, {report}")
