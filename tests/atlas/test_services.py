"""Writes: loading the curated file, and the suggestion review flow."""

import pytest

from atlas.datafile import records_from_file
from atlas.models import AtlasChange, Suggestion, Work
from atlas.records import RecordError, record_from_row
from atlas.services import (
    ReviewError,
    atlas_load,
    suggestion_approve,
    suggestion_reject,
    suggestion_submit,
)
from tests.atlas.conftest import SMALL_ATLAS, make_row

pytestmark = pytest.mark.django_db


def _load(*rows):
    return atlas_load(records=[record_from_row(row) for row in rows], source="test")


def test_loading_creates_then_updates_then_leaves_works_unchanged() -> None:
    # given
    first = _load(make_row(1), make_row(2))
    # when
    second = _load(make_row(1, title="Work one, retitled"), make_row(2), make_row(3))
    third = _load(make_row(1, title="Work one, retitled"), make_row(2), make_row(3))
    # then
    assert (first.created, first.updated, first.unchanged) == (2, 0, 0)
    assert (second.created, second.updated, second.unchanged) == (1, 1, 1)
    assert (third.created, third.updated, third.unchanged) == (0, 0, 3)
    assert Work.objects.get(slug="work-1").title == "Work one, retitled"


def test_a_change_of_a_multi_valued_facet_alone_is_an_update() -> None:
    _load(make_row(1, modality=["language"]))
    report = _load(make_row(1, modality=["language", "vision"]))
    assert report.updated == 1
    assert Work.objects.get(slug="work-1").modality == ["language", "vision"]


def test_only_a_load_that_changes_something_is_a_new_data_version() -> None:
    _load(make_row(1))
    _load(make_row(1))
    assert AtlasChange.objects.count() == 1
    _load(make_row(1, summary="Changed."))
    assert AtlasChange.objects.count() == 2


def test_a_reload_of_the_small_atlas_is_idempotent(small_atlas) -> None:
    # given
    before = list(Work.objects.values())
    # when
    report = atlas_load(records=records_from_file(SMALL_ATLAS), source="again")
    # then
    assert (report.created, report.updated, report.unchanged) == (0, 0, len(small_atlas))
    assert list(Work.objects.values()) == before


def test_colliding_citation_keys_get_letters_past_z() -> None:
    same = {"authors": ["Ada Lovelace"], "month": "2024-01", "title": "Loops"}
    _load(*(make_row(n, **same) for n in range(1, 30)))
    keys = set(Work.objects.values_list("citation_key", flat=True))
    assert len(keys) == 29
    assert {"lovelace2024loops", "lovelace2024loopsz", "lovelace2024loopsaa"} <= keys


def test_citation_keys_are_unique_and_kept_when_a_work_changes() -> None:
    # given two works whose natural keys collide
    same = {"authors": ["Ada Lovelace"], "month": "2024-01", "title": "Loops all the way"}
    _load(make_row(1, **same), make_row(2, **same))
    keys = dict(Work.objects.values_list("slug", "citation_key"))
    # when
    _load(make_row(1, **same | {"title": "Different now"}), make_row(2, **same))
    # then
    assert sorted(keys.values()) == ["lovelace2024loops", "lovelace2024loopsa"]
    assert dict(Work.objects.values_list("slug", "citation_key")) == keys


def test_an_approved_suggestion_is_applied_and_records_who_and_when(small_atlas, curator) -> None:
    # given
    work = Work.objects.get(slug="universal-transformers")
    suggestion = suggestion_submit(
        work=work, field="kv_strategy", proposed_value=" per-loop ", rationale="Section 3."
    )
    versions = AtlasChange.objects.count()
    # when
    suggestion_approve(suggestion=suggestion, reviewer=curator)
    # then
    work.refresh_from_db()
    suggestion.refresh_from_db()
    assert work.kv_strategy == "per-loop"
    assert work.reviewed_at == suggestion.reviewed_at is not None
    assert suggestion.status == Suggestion.Status.APPROVED
    assert (suggestion.reviewed_by, suggestion.previous_value) == (curator, "unspecified")
    assert AtlasChange.objects.count() == versions + 1


def test_an_approved_list_suggestion_replaces_the_tags(small_atlas, curator) -> None:
    work = Work.objects.get(slug="universal-transformers")
    suggestion = suggestion_submit(
        work=work, field="topics", proposed_value="halting; weight-sharing", rationale="Abstract."
    )
    suggestion_approve(suggestion=suggestion, reviewer=curator)
    assert Work.objects.get(pk=work.pk).topics == ["halting", "weight-sharing"]
    assert Suggestion.objects.get().previous_value == "adaptive-computation"


def test_a_rejected_suggestion_changes_nothing(small_atlas, curator) -> None:
    work = Work.objects.get(slug="universal-transformers")
    suggestion = suggestion_submit(
        work=work, field="title", proposed_value="UT", rationale="Shorter."
    )
    versions = AtlasChange.objects.count()
    suggestion_reject(suggestion=suggestion, reviewer=curator, note="Not the published title.")
    work.refresh_from_db()
    suggestion.refresh_from_db()
    assert work.title == "Universal Transformers" and work.reviewed_at is None
    assert suggestion.status == Suggestion.Status.REJECTED
    assert suggestion.reviewed_by == curator
    assert AtlasChange.objects.count() == versions


def test_a_suggestion_is_reviewed_only_once(small_atlas, curator) -> None:
    work = Work.objects.get(slug="universal-transformers")
    suggestion = suggestion_submit(work=work, field="venue", proposed_value="ICLR", rationale="r")
    suggestion_reject(suggestion=suggestion, reviewer=curator)
    with pytest.raises(ReviewError, match="already Rejected"):
        suggestion_approve(suggestion=suggestion, reviewer=curator)


def test_a_suggestion_outside_the_vocabulary_is_not_queued(small_atlas) -> None:
    work = Work.objects.get(slug="universal-transformers")
    with pytest.raises(RecordError, match="not an allowed depth_control value"):
        suggestion_submit(work=work, field="depth_control", proposed_value="vibes", rationale="r")
    assert not Suggestion.objects.exists()
