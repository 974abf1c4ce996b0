"""The curated data file itself (atlas/data/works.yaml): complete, valid, loadable twice."""

import functools
from io import StringIO

import pytest
import yaml
from django.core.management import call_command

from atlas import taxonomy
from atlas.datafile import DEFAULT_PATH, records_from_file
from atlas.models import Work

WORKS = 199


@functools.cache
def _rows() -> list[dict]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(DEFAULT_PATH.read_text(encoding="utf-8"), Loader=loader)["works"]


def test_the_file_holds_every_work_once_in_seed_order() -> None:
    records = records_from_file(DEFAULT_PATH)
    assert len(records) == WORKS
    assert [record.position for record in records] == list(range(1, WORKS + 1))
    assert len({record.slug for record in records}) == WORKS


@pytest.mark.parametrize("facet", taxonomy.FACETS, ids=lambda facet: facet.name)
def test_every_facet_value_is_in_the_vocabulary(facet: taxonomy.Facet) -> None:
    for row in _rows():
        values = row[facet.name] if facet.multi else [row[facet.name]]
        assert values, f"n={row['n']} has no {facet.name}"
        assert set(values) <= set(facet.slugs), f"n={row['n']}: {facet.name}={values}"


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
