"""Reading the data file: every bad row is reported with its position."""

import pytest

from atlas.datafile import DataFileError, records_from_file
from tests.atlas.conftest import make_row


def test_every_row_of_a_valid_file_becomes_a_record(data_file) -> None:
    path = data_file([make_row(1), make_row(2)])
    assert [record.slug for record in records_from_file(path)] == ["work-1", "work-2"]


def test_each_bad_row_is_named_by_position_with_its_reason(data_file) -> None:
    # given
    path = data_file([make_row(1), make_row(2, depth_control="sometimes"), make_row(3, url="x")])
    # when
    with pytest.raises(DataFileError) as refused:
        records_from_file(path)
    # then
    assert refused.value.problems == [
        "row 2 (n=2, slug=work-2): depth_control: 'sometimes' is not an allowed depth_control "
        "value; allowed: fixed, elastic, halting, exit-gate, router, convergence, unspecified",
        "row 3 (n=3, slug=work-3): url: 'x' is not an http(s) URL",
    ]


def test_a_slug_or_position_used_twice_is_refused(data_file) -> None:
    path = data_file([make_row(1), make_row(2, slug="work-1"), make_row(1, slug="other")])
    with pytest.raises(DataFileError) as refused:
        records_from_file(path)
    assert refused.value.problems == [
        "row 2 (n=2, slug=work-1): slug is already used by row 1",
        "row 3 (n=1, slug=other): n is already used by row 1",
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("works: [", "not valid YAML"),
        ("- just a list", "must be a mapping with a 'works' list"),
        ("works: 3", "must be a mapping with a 'works' list"),
    ],
)
def test_a_file_that_is_not_an_atlas_is_refused(tmp_path, text, problem) -> None:
    path = tmp_path / "works.yaml"
    path.write_text(text)
    with pytest.raises(DataFileError, match=problem):
        records_from_file(path)


def test_a_missing_file_is_refused_with_the_reason(tmp_path) -> None:
    with pytest.raises(DataFileError, match="cannot read the file"):
        records_from_file(tmp_path / "absent.yaml")
