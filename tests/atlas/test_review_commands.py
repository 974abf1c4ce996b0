"""A review file's way into the atlas: ``propose_works`` proposes its entries,
``review_proposals`` applies the decisions, ``suggest_facts`` fills facts through approved
suggestions, and ``dump_atlas``/``load_atlas`` carry the works and the intake log's
decisions to a fresh install."""

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from atlas.models import Proposal, Suggestion, Work

pytestmark = pytest.mark.django_db

REVIEW = Path(__file__).parent / "data" / "review.yaml"
SOURCE = "example/Loop-List@0123abc:catalog/papers.json#"


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def curator():
    return get_user_model().objects.create_user("curator")


@pytest.fixture
def reviewed(small_atlas, curator) -> str:
    """The review file proposed and applied; the review's report."""
    run("propose_works", str(REVIEW))
    return run("review_proposals", str(REVIEW), "--reviewer", "curator")


def test_a_review_file_proposes_its_proposal_fields_only(small_atlas) -> None:
    report = run("propose_works", str(REVIEW)).splitlines()
    assert report[2].startswith(f"entry 3 ({SOURCE}loopfold): duplicate: skipped: Already there")
    assert report[-1] == "3 proposed, 1 duplicate, 0 invalid"
    spiral = Proposal.objects.get(arxiv_id="2611.04321")
    assert spiral.status == Proposal.Status.PENDING and spiral.review_note == ""
    assert spiral.authors_et_al is True
    assert spiral.facts_source == f"{SOURCE}2611.04321"


def test_the_decisions_accept_and_reject_with_their_public_reasons(reviewed, curator) -> None:
    lines = reviewed.splitlines()
    spiral = Proposal.objects.get(arxiv_id="2611.04321")
    lstm = Proposal.objects.get(arxiv_id="2611.05555")
    work = Work.objects.get(proposal=spiral)
    assert lines[0].endswith(f": accepted: proposal #{spiral.pk} → {work.slug}")
    assert lines[1].endswith(f": rejected: proposal #{lstm.pk}: {lstm.review_note}")
    assert lines[2].endswith(": not proposed: no proposal of it in the intake log")
    assert lines[-1] == "2 accepted, 1 rejected, 0 already, 0 differs, 1 not proposed, 0 failed"
    assert lstm.status == Proposal.Status.REJECTED and lstm.reviewed_by_id == curator.pk
    assert lstm.review_note == "Out of scope: a recurrent network over time, not over depth."
    assert spiral.review_note == "In scope: one block iterated over depth."
    assert work.authors_et_al is True and work.authors == ["Ada Lovelace", "Alan Turing"]
    assert work.facts_source == (
        f"{SOURCE}2611.04321 (via proposal #{spiral.pk} in the intake log)"
    )
    assert work.evidence["depth_control"]["source"] == f"{SOURCE}2611.04321"


def test_every_decision_is_in_the_intake_log(reviewed, client) -> None:
    log = client.get("/api/v1/proposals/").json()["results"]
    decided = {row["title"]: (row["status"], row["reason"]) for row in log}
    assert decided == {
        "Spiral Loops: Depth Reuse for Small Reasoners": (
            "accepted",
            "In scope: one block iterated over depth.",
        ),
        "Long Short-Term Memory for Streams": (
            "rejected",
            "Out of scope: a recurrent network over time, not over depth.",
        ),
        "Quiet Equilibria in Looped Encoders": (
            "accepted",
            "In scope: a fixed-point layer iterated to equilibrium.",
        ),
    }
    assert all(row["authors_et_al"] in (True, False) and "contact" not in row for row in log)
    page = client.get("/intake/").content.decode()
    assert "Out of scope: a recurrent network over time, not over depth." in page
    assert "What belongs in the atlas" in page and "RAFT: Recurrent All-Pairs" in page


def test_proposing_and_applying_the_review_again_changes_nothing(reviewed) -> None:
    works, proposals = Work.objects.count(), Proposal.objects.count()
    proposed = run("propose_works", str(REVIEW)).splitlines()
    again = run("review_proposals", str(REVIEW), "--reviewer", "curator")
    lstm = Proposal.objects.get(arxiv_id="2611.05555")
    assert proposed[1].endswith(
        f"duplicate: skipped: proposal #{lstm.pk} (rejected) has the same source"
    )
    assert proposed[-1] == "0 proposed, 4 duplicate, 0 invalid"
    assert (
        again.splitlines()[-1]
        == "0 accepted, 0 rejected, 3 already, 0 differs, 1 not proposed, 0 failed"
    )
    assert (Work.objects.count(), Proposal.objects.count()) == (works, proposals)


def test_an_entry_changed_after_its_review_is_reported_not_applied(reviewed, tmp_path) -> None:
    entries = yaml.safe_load(REVIEW.read_text())
    entries[0]["summary"] = "Iterates one shared block on puzzles. Deeper loops help."
    changed = tmp_path / "review.yaml"
    changed.write_text(yaml.safe_dump(entries), encoding="utf-8")
    report = run("review_proposals", str(changed), "--reviewer", "curator").splitlines()
    assert report[0].endswith("was already accepted; the file now differs in summary")
    assert report[-1] == "0 accepted, 0 rejected, 2 already, 1 differs, 1 not proposed, 0 failed"
    assert Work.objects.get(arxiv_id="2611.04321").summary != entries[0]["summary"]


def test_an_entry_to_accept_without_a_proposal_fails_the_command(small_atlas, curator) -> None:
    with pytest.raises(CommandError, match="2 decision"):
        run("review_proposals", str(REVIEW), "--reviewer", "curator")


def test_an_unknown_reviewer_is_refused(small_atlas) -> None:
    with pytest.raises(CommandError, match="no user 'nobody'"):
        run("review_proposals", str(REVIEW), "--reviewer", "nobody")


def test_the_curators_edits_in_the_file_are_applied_before_accepting(
    small_atlas, curator, tmp_path
) -> None:
    # given the file proposed, then its summary corrected
    run("propose_works", str(REVIEW))
    entries = yaml.safe_load(REVIEW.read_text())
    entries[0]["summary"] = "Iterates one shared block on puzzles. Deeper loops help."
    edited = tmp_path / "review.yaml"
    edited.write_text(yaml.safe_dump(entries), encoding="utf-8")
    # when
    report = run("review_proposals", str(edited), "--reviewer", "curator")
    # then
    assert "(edited: summary)" in report.splitlines()[0]
    assert Work.objects.get(arxiv_id="2611.04321").summary == entries[0]["summary"]


def test_a_fresh_install_loads_the_same_atlas_and_intake_log(reviewed, client, tmp_path) -> None:
    # given the grown atlas dumped (its proposers left contacts)
    Proposal.objects.update(contact="ada@example.org")
    works = tmp_path / "works.yaml"
    run("dump_atlas", str(works))
    intake = (tmp_path / "intake.yaml").read_text()
    log = client.get("/api/v1/proposals/").json()["results"]
    assert "ada@example.org" not in intake and "proposals:\n- id: " in intake
    # when everything is gone and the files are loaded
    Proposal.objects.all().delete()
    Work.objects.all().delete()
    report = run("load_atlas", str(works))
    # then the intake log is the same, and dumping again gives the same bytes
    assert "works.yaml: 10 works, 10 created, 0 updated, 0 unchanged" in report
    assert "intake.yaml: 3 decisions, 3 created, 0 updated, 0 unchanged" in report
    assert client.get("/api/v1/proposals/").json()["results"] == log
    copy = tmp_path / "copy" / "works.yaml"
    copy.parent.mkdir()
    run("dump_atlas", str(copy))
    assert copy.read_bytes() == works.read_bytes()
    assert (copy.parent / "intake.yaml").read_text() == intake
    # and the changes list the intake's additions under a data version of their own
    changes = client.get("/api/v1/changes/").json()["changes"]
    added = {(row["kind"], row["work"]) for row in changes if row["field"] == "work"}
    accepted = {("proposal", p["work"]) for p in log if p["status"] == "accepted"}
    assert len(added) == 10 and accepted <= added
    assert len({row["version"] for row in changes if row["kind"] == "proposal"}) == 1
    # and a new proposal gets the next number
    assert Proposal.objects.create(**_minimal()).pk > max(row["id"] for row in log)


def _minimal() -> dict:
    return {
        "title": "Another",
        "month": "2026-11-01",
        "summary": "S.",
        "recurrence_family": "universal",
        "rationale": "R.",
    }


def test_an_intake_entry_naming_a_missing_work_is_refused(reviewed, tmp_path) -> None:
    works = tmp_path / "works.yaml"
    run("dump_atlas", str(works))
    intake = tmp_path / "intake.yaml"
    intake.write_text(intake.read_text().replace("work: spiral-loops", "work: nowhere"))
    with pytest.raises(CommandError, match=r"entry 1 \(id=\d+\): work 'nowhere"):
        run("load_atlas", str(works))


FILLS = (
    "n\ttitle\tfield\tvalue\tsource_repo_path\n"
    "1\tLoopFold: Parallelizing Recurrent Depth in Looped Transformers\tcode_url\t"
    "https://github.com/example/loopfold\texample/Loop-List@0123abc:catalog/papers.json#lf\n"
)


def test_fact_fills_are_approved_suggestions_once(small_atlas, curator, tmp_path) -> None:
    path = tmp_path / "fills.tsv"
    path.write_text(FILLS, encoding="utf-8")
    first = run("suggest_facts", str(path), "--reviewer", "curator")
    second = run("suggest_facts", str(path), "--reviewer", "curator")
    suggestion = Suggestion.objects.get()
    assert suggestion.status == Suggestion.Status.APPROVED
    assert suggestion.reviewed_by_id == curator.pk
    assert "#lf gives it" in suggestion.rationale
    assert first.splitlines()[-1] == "1 approved, 0 already, 0 failed"
    assert second.splitlines()[-1] == "0 approved, 1 already, 0 failed"
    work = Work.objects.get(slug="loopfold-parallelizing-recurrent-depth")
    assert work.code_url == "https://github.com/example/loopfold"


def test_the_copy_check_finds_a_run_of_eight_words_and_nothing_shorter() -> None:
    from atlas.shingles import copied_runs, digest_text

    digest = set(digest_text(["It solves hard Sudoku puzzles with ten million weights."]).split())
    assert copied_runs("Ours SOLVES hard sudoku puzzles, with ten million weights!", digest) == [
        "solves hard sudoku puzzles with ten million weights"
    ]
    assert copied_runs("It solves hard Sudoku puzzles with ten weights.", digest) == []
