from pathlib import Path

from django.core.management.base import BaseCommand

from atlas.datafile import DEFAULT_PATH, file_header, file_text
from atlas.intakefile import FILE_NAME, intake_text
from atlas.models import Proposal, Work
from atlas.services import work_state


class Command(BaseCommand):
    help = (
        "Write the atlas as it is in the database back into the data file's format (its "
        "header kept), and the intake log's decisions into intake.yaml beside it, so "
        "accepted works and the decisions can be committed; the same atlas gives the same "
        "bytes."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)

    def handle(self, *, path: Path, **options) -> None:
        rows = [work_state(work) for work in Work.objects.prefetch_related("tags")]
        path.write_text(file_text(rows, header=file_header(path)), encoding="utf-8")
        intake = path.with_name(FILE_NAME)
        intake.write_text(intake_text(), encoding="utf-8")
        decided = Proposal.objects.exclude(status=Proposal.Status.PENDING).count()
        self.stdout.write(f"{path.name}: {len(rows)} works written")
        self.stdout.write(f"{intake.name}: {decided} reviewed proposals written")
