"""The curated data files themselves (atlas/data/works.yaml and the intake's decisions
beside it): complete, valid, loadable twice, what dump_atlas writes, without duplicates,
every label of an accepted work sourced, no summary copying a list's description."""

import functools
import re
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from atlas import scope, taxonomy
from atlas.datafile import DEFAULT_PATH, records_from_file
from atlas.duplicates import Candidate, matches
from atlas.intakefile import FILE_NAME
from atlas.models import Work
from atlas.records import LIST_SOURCE_RE, SOURCE_KINDS
from atlas.shingles import DIGEST_PATH, copied_runs

INTAKE_PATH = DEFAULT_PATH.with_name(FILE_NAME)
_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _rows() -> list[dict]:
    return yaml.load(DEFAULT_PATH.read_text(encoding="utf-8"), Loader=_loader)["works"]


@functools.cache
def _decisions() -> list[dict]:
    return yaml.load(INTAKE_PATH.read_text(encoding="utf-8"), Loader=_loader)["proposals"]


def _accepted_slugs() -> set[str]:
    return {entry["work"] for entry in _decisions() if entry["status"] == "accepted"}


WORKS = len(_rows())


def test_the_file_holds_every_work_once_in_seed_order() -> None:
    # the seed's works first (newest first), then each accepted proposal's in turn
    records = records_from_file(DEFAULT_PATH)
    assert [record.position for record in records] == list(range(1, WORKS + 1))
    assert len({record.slug for record in records}) == WORKS
    accepted = _accepted_slugs()
    assert {r.slug for r in records if r.position > WORKS - len(accepted)} == accepted


def test_every_decision_of_the_intake_is_public_and_reasoned() -> None:
    for entry in _decisions():
        assert entry["status"] in ("accepted", "rejected") and "contact" not in entry
        if entry["status"] == "rejected":
            assert re.match(r"(Out of scope|Duplicate|Not a paper): ", entry["reason"]), entry


@pytest.mark.parametrize("facet", taxonomy.FACETS, ids=lambda facet: facet.name)
def test_every_facet_value_is_in_the_vocabulary(facet: taxonomy.Facet) -> None:
    for row in _rows():
        values = row[facet.name] if facet.multi else [row[facet.name]]
        assert set(values) <= set(facet.slugs), f"n={row['n']}: {facet.name}={values}"
    # An empty list says that no source (or no term of the vocabulary) gives the facet:
    # only works accepted through the intake, sourced label by label, leave one empty.
    empty = {row["slug"] for row in _rows() if not row[facet.name]}
    assert empty <= _accepted_slugs(), f"{facet.name} is empty for {sorted(empty)}"


def test_non_ascii_titles_are_kept_exactly() -> None:
    titles = {row["title"] for row in _rows()}
    assert "Déjà View: Looping Transformers for Multi-View 3D Reconstruction" in titles


@pytest.mark.django_db
def test_loading_it_twice_changes_nothing_the_second_time() -> None:
    # given
    first, second = StringIO(), StringIO()
    call_command("load_atlas", stdout=first)
    loaded = list(Work.objects.order_by("slug").values())
    # when
    call_command("load_atlas", stdout=second)
    # then
    assert f"{WORKS} created, 0 updated, 0 unchanged" in first.getvalue()
    assert f"0 created, 0 updated, {WORKS} unchanged" in second.getvalue()
    assert list(Work.objects.order_by("slug").values()) == loaded
    assert Work.objects.values("citation_key").distinct().count() == WORKS


def _row(slug: str) -> dict:
    return next(row for row in _rows() if row["slug"] == slug)


def test_the_sourced_labels_of_december_5_are_applied_with_their_source() -> None:
    # a medium/high-confidence value for an unspecified label, with the source it rests on
    hrm = _row("hierarchical-reasoning-model")
    assert (hrm["depth_control"], hrm["depth_granularity"]) == ("exit-gate", "sequence")
    assert hrm["evidence"]["depth_granularity"]["source"].startswith("https://github.com/")
    # and a value that a rule forces comes with it, saying so
    tah = _row("think-at-hard-selective-latent-iterations-to-improve")
    assert tah["training_regime"] == "retrofit" and "retrofit" in tah["contribution"]
    assert "rule retrofit-contribution" in tah["evidence"]["contribution"]["note"]


def test_low_confidence_and_conflicting_proposals_are_recorded_not_applied() -> None:
    # a conflict with the current label: the label stays, the proposal is recorded
    two_scale = _row("two-scale-latent-dynamics-for-recurrent-depth-transformers")
    assert two_scale["recurrence_family"] == "hierarchical"
    conflict = two_scale["evidence"]["recurrence_family"]["conflict"]
    assert (
        conflict.startswith("Proposed prelude-core-coda, not applied") and "arxiv.org" in conflict
    )
    # a low-confidence value for an unspecified label stays unspecified
    looped_actor = _row("looped-actor-depth-recurrent-reasoning-models-for")
    assert looped_actor["depth_control"] == "unspecified"
    assert "(low confidence)" in looped_actor["evidence"]["depth_control"]["conflict"]


@pytest.mark.django_db
def test_the_files_are_what_dump_atlas_writes_from_them(tmp_path: Path) -> None:
    # given the shipped files loaded (every work and decision checked on the way)
    out = StringIO()
    call_command("load_atlas", stdout=out)
    assert f"{len(_decisions())} decisions" in out.getvalue()
    # when the atlas is dumped
    dumped = tmp_path / "works.yaml"
    call_command("dump_atlas", str(dumped), stdout=StringIO())
    # then the bytes are the shipped ones
    assert dumped.read_bytes() == DEFAULT_PATH.read_bytes()
    assert dumped.with_name(FILE_NAME).read_bytes() == INTAKE_PATH.read_bytes()


def test_no_two_works_name_the_same_paper_under_the_intakes_duplicate_check() -> None:
    candidates = [
        Candidate("work", row["slug"], row["title"], row["arxiv_id"] or "", "") for row in _rows()
    ]
    found = [
        f"{work.ident} ~ {match.describe()}"
        for index, work in enumerate(candidates)
        for match in matches(
            title=work.title, arxiv_id=work.arxiv_id, candidates=candidates[index + 1 :]
        )
    ]
    assert found == []


def _labelled(row: dict, facet: taxonomy.Facet) -> bool:
    value = row[facet.name]
    return bool(value) if facet.multi else value != taxonomy.UNSPECIFIED.slug


def test_every_label_of_an_accepted_work_has_its_basis() -> None:
    accepted = [row for row in _rows() if row["slug"] in _accepted_slugs()]
    unsourced = [
        f"{row['slug']}: {facet.name}"
        for row in accepted
        for facet in taxonomy.FACETS
        if _labelled(row, facet) and facet.name not in (row.get("evidence") or {})
    ]
    assert unsourced == []


def test_atlas_report_counts_the_labels_resting_on_list_entries() -> None:
    on_lists = sum(
        len(row[name]) if taxonomy.FACETS_BY_NAME[name].multi else 1
        for row in _rows()
        for name, basis in (row.get("evidence") or {}).items()
        if LIST_SOURCE_RE.match(basis["source"])
    )
    out = StringIO()
    call_command("atlas_report", stdout=out)
    lines = out.getvalue().splitlines()
    kinds = lines[lines.index("labels by source of their basis:") + 1 :][: len(SOURCE_KINDS)]
    assert [line.split()[0] for line in kinds] == list(SOURCE_KINDS)
    assert f"  {'list':<22} {on_lists:>4}" in kinds


def test_no_summary_copies_a_run_of_eight_words_from_the_lists_descriptions() -> None:
    digest = set(DIGEST_PATH.read_text(encoding="utf-8").split())
    assert digest, "the digest of the lists' descriptions is empty"
    copied = {row["slug"]: runs for row in _rows() if (runs := copied_runs(row["summary"], digest))}
    assert copied == {}


def test_the_scope_statements_near_misses_are_decided_as_it_says() -> None:
    readme = " ".join(DEFAULT_PATH.with_name("README.md").read_text(encoding="utf-8").split())
    decided = {entry["title"]: entry["status"] for entry in _decisions()}
    if not decided:
        pytest.skip("the intake log holds no decisions yet")
    for miss in scope.NEAR_MISSES:
        assert miss.title in readme
        assert decided[miss.title] == ("accepted" if miss.accepted else "rejected"), miss.title
