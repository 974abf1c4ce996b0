"""``manage.py load_atlas``: reports counts, refuses bad files and changes nothing then."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from atlas import services
from atlas.models import Work
from tests.atlas.conftest import SMALL_ATLAS, make_row

pytestmark = pytest.mark.django_db


def _run(path) -> str:
    out = StringIO()
    call_command("load_atlas", str(path), stdout=out)
    return out.getvalue()


def test_it_reports_created_updated_and_unchanged_counts() -> None:
    assert "8 works, 8 created, 0 updated, 0 unchanged" in _run(SMALL_ATLAS)
    assert "8 works, 0 created, 0 updated, 8 unchanged" in _run(SMALL_ATLAS)


def test_a_bad_row_is_refused_with_its_position_and_nothing_changes(data_file) -> None:
    # given a loaded atlas, and a file that changes one work and breaks another
    _run(data_file([make_row(1), make_row(2)]))
    before = list(Work.objects.order_by("slug").values())
    bad = data_file([make_row(1, title="Changed"), make_row(2), make_row(3, kv_strategy="huge")])
    # when
    with pytest.raises(CommandError) as refused:
        _run(bad)
    # then
    assert "row 3 (n=3, slug=work-3): kv_strategy: 'huge' is not an allowed" in str(refused.value)
    assert list(Work.objects.order_by("slug").values()) == before


def test_a_failure_while_writing_leaves_nothing_half_loaded(data_file, monkeypatch) -> None:
    # given
    _run(data_file([make_row(1)]))

    def broken(**kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(services, "_tags_replace", broken)
    # when
    with pytest.raises(RuntimeError):
        _run(data_file([make_row(1, title="Changed"), make_row(2)]))
    # then
    assert list(Work.objects.values_list("slug", "title")) == [("work-1", "Work number 1")]


def _report(path) -> str:
    out = StringIO()
    call_command("atlas_report", str(path), stdout=out)
    return out.getvalue()


def test_atlas_report_counts_values_sources_and_works_without_facts(data_file) -> None:
    evidence = {"kv_strategy": {"note": "Stated in seed 000.", "source": "seed 000"}}
    path = data_file(
        [
            make_row(1, facts_source="https://example.org/a"),
            make_row(2, depth_control="unspecified", depth_granularity="unspecified"),
            make_row(3, evidence=evidence),
        ]
    )
    lines = _report(path).splitlines()
    assert lines[0] == "3 works"
    assert lines[lines.index("depth_control (works):") + 1].split() == ["fixed", "2"]
    assert lines[lines.index("depth_control (works):") + 7].split() == ["unspecified", "1"]
    sources = lines.index("labels by source of their basis:")
    assert [line.split() for line in lines[sources + 1 : sources + 6]] == [
        ["summary", str(3 * 7 - 1)],
        ["facts", "0"],
        ["seed", "1"],
        ["list", "0"],
        ["url", "0"],
    ]
    assert "works without facts: 2" in lines
    assert "  n=2 work-2" in lines and "  n=3 work-3" in lines
    assert lines[-1] == "rule violations: 0"


def test_atlas_report_lists_every_violation_and_fails(data_file) -> None:
    path = data_file(
        [make_row(1, depth_granularity="token"), make_row(2, training_regime="retrofit")]
    )
    out = StringIO()
    with pytest.raises(CommandError, match="2 rule violation"):
        call_command("atlas_report", str(path), stdout=out)
    assert out.getvalue().splitlines()[-3:] == [
        "rule violations: 2",
        "  n=1 work-1: fixed-depth-granularity: depth_control 'fixed' goes with "
        "depth_granularity 'none', and only it",
        "  n=2 work-2: retrofit-contribution: a retrofit training regime goes with a "
        "retrofit contribution",
    ]
