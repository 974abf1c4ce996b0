"""``propose_works`` (BibTeX or TSV, each entry checked as the API checks it) and
``dump_atlas`` (the atlas back in the data file's format, byte-stable)."""

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from atlas.datafile import DEFAULT_PATH, records_from_file
from atlas.models import Proposal, Work
from atlas.proposals import proposal_accept, proposal_submit
from tests.atlas.api.test_proposals import proposal

pytestmark = pytest.mark.django_db

BIBTEX = r"""
@article{elastic2026,
  title = {{Elastic} Loops: Depth on Demand},
  author = {Lovelace, Ada and Alan Turing},
  year = {2026}, month = nov,
  eprint = {2611.01234}, archivePrefix = {arXiv},
  abstract = {Lets each token pick its loop count with a learned exit gate.},
  recurrence_family = {looped-lm}, depth_control = {exit-gate}, depth_granularity = {token},
  modality = {language; algorithmic},
}
@inproceedings{ut-again,
  title = {Universal Transformers}, author = {Dehghani, Mostafa}, year = 2019,
  booktitle = {ICLR}, url = {https://openreview.net/forum?id=HyzdRiR9Y7},
  abstract = {Again.}, recurrence_family = {universal},
}
@misc{no-family,
  title = {A Looped Thing}, year = {2026}, url = {https://example.org/thing},
  abstract = {Loops.},
}
@misc{unfinished, title = {Broken
"""


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


def test_a_bibtex_file_proposes_the_good_entries_and_reports_the_rest(
    tmp_path: Path, small_atlas
) -> None:
    # given a file with a good, a duplicate, an invalid and an unreadable entry
    path = tmp_path / "works.bib"
    path.write_text(BIBTEX, encoding="utf-8")
    # when
    report = run("propose_works", str(path), "--rationale", "From the curators' reading list.")
    # then each is reported, and only the good one is stored
    lines = report.splitlines()
    stored = Proposal.objects.get()
    assert lines[0].startswith("line ") and ": invalid: not read:" in lines[0]
    assert lines[1] == (
        f"@article{{elastic2026}}: proposed: proposal #{stored.pk} Elastic Loops: Depth on Demand"
    )
    assert lines[2].startswith("@inproceedings{ut-again}: duplicate: skipped: Already there")
    assert "universal-transformers" in lines[2]
    assert lines[3] == "@misc{no-family}: invalid: recurrence_family: is required"
    assert lines[4] == "1 proposed, 1 duplicate, 2 invalid"
    assert stored.authors == ["Ada Lovelace", "Alan Turing"]
    assert f"{stored.month:%Y-%m}" == "2026-11" and stored.arxiv_id == "2611.01234"
    assert stored.modality == ["language", "algorithmic"]
    assert stored.rationale == "From the curators' reading list."


def test_a_tsv_with_the_apis_fields_goes_through_the_same_checks(tmp_path, small_atlas) -> None:
    path = tmp_path / "works.tsv"
    header = "title\turl\tmonth\tsummary\trecurrence_family\tmodality\trationale\tmonth_estimated"
    good = (
        "Halting Loops\thttps://example.org/h\t2026-10\tHalts.\tlooped-lm\tlanguage\tIn scope.\tyes"
    )
    bad = "Bad Loops\tftp://example.org/b\t2026-10\tBad.\tlooped-lm\t\tIn scope.\tno"
    path.write_text("\n".join([header, good, bad]) + "\n", encoding="utf-8")
    report = run("propose_works", str(path))
    assert f"row 2: proposed: proposal #{Proposal.objects.get().pk} Halting Loops" in report
    assert "row 3: invalid: url: 'ftp://example.org/b' is not an http(s) URL" in report
    assert Proposal.objects.get().month_estimated is True


def test_the_dump_holds_the_data_file_and_is_byte_stable(tmp_path: Path) -> None:
    # given the shipped data file loaded
    call_command("load_atlas", verbosity=0)
    # when it is dumped, loaded into an empty atlas and dumped again
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    run("dump_atlas", str(first))
    Work.objects.all().delete()
    call_command("load_atlas", str(first), verbosity=0)
    run("dump_atlas", str(second))
    # then the two dumps are the same bytes, with the file's header and its works
    assert first.read_bytes() == second.read_bytes()
    assert first.read_text().startswith(DEFAULT_PATH.read_text().split("works:\n")[0])
    shipped = {r.slug: _as_sets(r.values) for r in records_from_file(DEFAULT_PATH)}
    dumped = {r.slug: _as_sets(r.values) for r in records_from_file(first)}
    assert dumped == shipped


def _as_sets(values: dict) -> dict:
    """The database keeps list facets and topics as sets (the file, in a curator's order)."""
    return {
        k: frozenset(v) if isinstance(v, list) and k != "authors" else v for k, v in values.items()
    }


def test_after_accepting_a_work_the_dump_differs_by_that_work_only(tmp_path, small_atlas):
    # given a dump of the atlas
    before, after = tmp_path / "before.yaml", tmp_path / "after.yaml"
    run("dump_atlas", str(before))
    # when a proposal is accepted and the atlas dumped again
    proposal_accept(proposal=proposal_submit(data=proposal()), reviewer=None)
    run("dump_atlas", str(after))
    # then the new dump is the old one with the new work at its end, which loads back
    added = after.read_text().removeprefix(before.read_text())
    assert added.startswith(
        "- n: 9\n  slug: elastic-loops-depth-on-demand-for-looped-transformers\n"
    )
    assert '  evidence:\n    depth_control:\n      note: "Section 3\'s gate."\n' in added
    assert len(records_from_file(after)) == 9
