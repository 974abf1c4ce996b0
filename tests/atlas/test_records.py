"""Field rules shared by the data file and by suggestions."""

from datetime import date

import pytest

from atlas.records import (
    RecordError,
    evidence_source_kind,
    list_entry_url,
    record_from_row,
    value_from_text,
    value_to_text,
)
from tests.atlas.conftest import make_row


def test_a_valid_row_becomes_a_record_with_normalised_optional_values() -> None:
    # given
    row = make_row(3, venue=None, authors_et_al=True)
    del row["topics"]
    # when
    record = record_from_row(row)
    # then
    assert record.slug == "work-3" and record.position == 3
    assert record.values["month"] == date(2013, 4, 1)
    assert record.values["venue"] == "" and record.values["topics"] == []
    assert record.values["authors_et_al"] is True


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"recurrence_family": "loopy"}, "recurrence_family: 'loopy' is not an allowed"),
        ({"modality": ["language", "smell"]}, "modality: 'smell' is not an allowed"),
        ({"modality": "language"}, "modality: must be a list"),
        ({"month": "2026-13"}, "month: '2026-13' is not a month in the form YYYY-MM"),
        ({"month": "Oct 2026"}, "is not a month"),
        ({"url": "javascript:alert(1)"}, "url: 'javascript:alert(1)' is not an http(s) URL"),
        ({"arxiv_id": "arXiv 1234"}, "arxiv_id: 'arXiv 1234' is not an arXiv identifier"),
        ({"slug": "Not A Slug"}, "slug: 'Not A Slug' is not a slug"),
        ({"title": "  "}, "title: must not be empty"),
        ({"title": 42}, "title: must be text, not int"),
        ({"month_estimated": "yes"}, "month_estimated: must be true or false"),
        ({"n": 0}, "n: must be a whole number from 1"),
        ({"topics": ["kv-cache", "kv-cache"]}, "topics: lists 'kv-cache' more than once"),
        ({"facts_confidence": "sure"}, "facts_confidence: 'sure' is not one of high"),
        ({"colour": "red"}, "unknown field(s): colour"),
    ],
)
def test_a_bad_value_is_refused_with_the_field_and_the_reason(overrides, reason) -> None:
    with pytest.raises(RecordError) as refused:
        record_from_row(make_row(**overrides))
    assert reason in str(refused.value)


def test_a_vocabulary_error_lists_the_allowed_values() -> None:
    with pytest.raises(RecordError, match="allowed: per-loop, shared, best-available"):
        record_from_row(make_row(kv_strategy="cached"))


@pytest.mark.parametrize("missing", ["slug", "title", "month", "depth_control", "modality"])
def test_a_required_field_cannot_be_left_out(missing: str) -> None:
    row = make_row()
    del row[missing]
    with pytest.raises(RecordError, match=f"{missing}: is required"):
        record_from_row(row)


def test_a_row_must_be_a_mapping() -> None:
    with pytest.raises(RecordError, match="must be a mapping"):
        record_from_row(["not", "a", "row"])


@pytest.mark.parametrize(
    ("field", "text", "value"),
    [
        ("modality", "language; vision", ["language", "vision"]),
        ("authors", "Ada Lovelace;  Alan Turing ;", ["Ada Lovelace", "Alan Turing"]),
        ("month_estimated", "Yes", True),
        ("month", "2025-02", date(2025, 2, 1)),
        ("venue", "", ""),
        ("kv_strategy", "shared", "shared"),
    ],
)
def test_a_visitors_text_is_parsed_by_the_field_rules(field, text, value) -> None:
    assert value_from_text(field, text) == value


@pytest.mark.parametrize(
    ("field", "text", "reason"),
    [
        ("kv_strategy", "magic", "not an allowed kv_strategy value"),
        ("slug", "new-slug", "cannot be corrected"),
        ("facts_source", "x", "cannot be corrected"),
        ("month_estimated", "maybe", "answer yes or no"),
        ("title", "", "is required|must not be empty|must be text"),
    ],
)
def test_a_visitors_invalid_text_is_refused(field, text, reason) -> None:
    with pytest.raises(RecordError, match=reason):
        value_from_text(field, text)


@pytest.mark.parametrize(
    ("value", "text"),
    [(["a", "b"], "a; b"), (True, "yes"), (date(2024, 3, 1), "2024-03"), ("", "")],
)
def test_values_have_one_canonical_text_form(value, text) -> None:
    assert value_to_text(value) == text


@pytest.mark.parametrize(
    ("evidence", "problem"),
    [
        ({"colour": {"note": "n", "source": "summary"}}, "'colour': not a facet"),
        ({"kv_strategy": {"note": "n", "source": "a friend"}}, "'a friend' is not a source"),
        ({"kv_strategy": {"source": "summary"}}, "kv_strategy: must be text"),
        ({"kv_strategy": {"note": "n", "source": "summary", "why": "x"}}, "unknown key"),
    ],
)
def test_evidence_must_name_a_facet_a_note_and_a_known_source(evidence, problem) -> None:
    with pytest.raises(RecordError, match=problem):
        record_from_row(make_row(1, evidence=evidence))


LIST_ENTRY = "owner/some-list@068f16f97ee4:catalog/papers-002.json#2610.09876"


def test_evidence_sources_are_the_summary_facts_a_seed_a_list_entry_or_a_url() -> None:
    evidence = {
        facet: {"note": "n", "source": source}
        for facet, source in [
            ("training_regime", "facts"),
            ("depth_control", "seed 000_bad39026f2b3d836"),
            ("kv_strategy", "https://example.org/paper"),
            ("depth_granularity", LIST_ENTRY),
        ]
    }
    values = record_from_row(make_row(1, evidence=evidence)).values["evidence"]
    assert list(values) == ["depth_control", "depth_granularity", "kv_strategy", "training_regime"]
    kinds = [evidence_source_kind(basis["source"]) for basis in values.values()]
    assert kinds == ["seed", "list", "url", "facts"]


def test_a_list_entry_links_to_the_catalogue_file_at_its_commit() -> None:
    assert list_entry_url(LIST_ENTRY) == (
        "https://github.com/owner/some-list/blob/068f16f97ee4/catalog/papers-002.json"
    )
    with pytest.raises(ValueError):
        list_entry_url("owner/some-list:catalog.json#1")
