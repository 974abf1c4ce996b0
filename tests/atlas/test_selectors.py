"""Reads: facet counts, timeline, related works, Compare, data version."""

from datetime import date

import pytest
from django.http import QueryDict

from atlas.models import AtlasChange, Work
from atlas.selectors import (
    data_version,
    facet_counts,
    timeline_counts,
    timeline_points,
    work_filter,
    works_compare,
)
from atlas.services import atlas_change_record

pytestmark = pytest.mark.django_db


def _counts(query: str):
    filterset = work_filter(params=QueryDict(query))
    assert filterset.is_valid()
    return facet_counts(filterset=filterset)


def test_counts_without_filters_cover_the_whole_atlas(small_atlas) -> None:
    counts = _counts("")
    assert counts["recurrence_family"]["universal"] == 3
    assert sum(counts["recurrence_family"].values()) == len(small_atlas)
    assert counts["modality"] == {
        "language": 6,
        "algorithmic": 2,
        "vision": 2,
        "diffusion-generation": 1,
    }
    assert counts["topics"]["kv-cache"] == 2


def test_a_single_valued_facet_is_counted_as_if_its_own_choice_were_open(small_atlas) -> None:
    # given universal works only
    counts = _counts("recurrence_family=universal")
    # then the other families still show what choosing them would add
    assert counts["recurrence_family"]["token-routed"] == 1
    # and the other facets count within the three universal works
    assert counts["depth_control"] == {"elastic": 1, "convergence": 1, "halting": 1}
    assert counts["modality"] == {
        "vision": 2,
        "diffusion-generation": 1,
        "language": 1,
        "algorithmic": 1,
    }


def test_counts_follow_the_search(small_atlas) -> None:
    counts = _counts("search=Dehghani")
    assert counts["recurrence_family"] == {"universal": 1}


def test_the_timeline_counts_works_per_month_and_family(small_atlas) -> None:
    buckets = timeline_counts(queryset=Work.objects.all())
    october = [b for b in buckets if b.month == date(2026, 10, 1)]
    assert [(b.recurrence_family, b.works, b.estimated) for b in october] == [
        ("looped-lm", 1, 0),
        ("parallel-loop", 1, 1),
    ]
    assert sum(b.works for b in buckets) == len(small_atlas)
    assert buckets[0].month == date(2018, 7, 1)


def test_timeline_points_are_one_per_work_oldest_first(small_atlas) -> None:
    points = timeline_points(queryset=Work.objects.all())
    assert len(points) == len(small_atlas)
    assert points[0].slug == "universal-transformers"
    assert points[-1].month_estimated is True


def test_compare_keeps_the_order_names_unknown_slugs_and_drops_a_fourth(small_atlas) -> None:
    comparison = works_compare(
        slugs=[
            "universal-transformers",
            "nope",
            "mixture-of-recursions",
            "loop-think-generalize",
            "resid-quant-kv-cache",
        ]
    )
    assert [w.slug for w in comparison.works] == [
        "universal-transformers",
        "mixture-of-recursions",
        "loop-think-generalize",
    ]
    assert comparison.unknown == ["nope"] and comparison.dropped == ["resid-quant-kv-cache"]
    assert comparison.differs("kv_strategy") and not comparison.differs("depth_granularity")


def test_the_data_version_is_the_newest_change(small_atlas) -> None:
    first = data_version()
    change = atlas_change_record(kind=AtlasChange.Kind.EDIT, summary="x")
    assert first.change_id > 0 and data_version().change_id == change.pk
    assert data_version().label.endswith("Z")


def test_two_filtered_facets_are_each_counted_under_the_other(small_atlas) -> None:
    counts = _counts("recurrence_family=universal&depth_control=halting")
    # families among halting works; depth controls among universal works
    assert counts["recurrence_family"] == {"universal": 1, "analysis": 1}
    assert counts["depth_control"] == {"elastic": 1, "convergence": 1, "halting": 1}
    # open facets count within both filters
    assert counts["kv_strategy"] == {"unspecified": 1}
