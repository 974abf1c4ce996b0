"""Every input is bounded and deduplicated before it reaches SQL or the JSON decoder."""

import re

import pytest

from atlas.filters import MAX_VALUES
from loopatlas.api.parsers import MAX_BODY_BYTES, MAX_JSON_DEPTH, json_depth

pytestmark = pytest.mark.django_db

READS = ["/api/v1/works/", "/api/v1/facets/", "/api/v1/timeline/", "/api/v1/export/", "/"]


@pytest.mark.parametrize("url", READS)
def test_a_repeated_value_counts_once(client, small_atlas, url) -> None:
    # given the same filter value as often as a parameter takes values
    once = client.get(f"{url}?modality=language")
    # when
    repeated = client.get(f"{url}?" + "&".join(["modality=language"] * MAX_VALUES))
    # then the answer is the one for the value given once (the page also echoes its query)
    assert once.status_code == repeated.status_code == 200
    if url == "/":
        assert _works_in(repeated) == _works_in(once) != []
    else:
        assert repeated.content == once.content


def _works_in(page) -> list[str]:
    return re.findall(r'href="/works/([\w-]+)/"', page.content.decode())


@pytest.mark.parametrize("url", READS)
@pytest.mark.parametrize("values", [[f"topic-{n}" for n in range(500)], ["language"] * 999])
def test_more_values_than_the_limit_are_a_400_naming_it(client, small_atlas, url, values):
    # 999 repeats once overflowed the SQL expression tree (a 500)
    response = client.get(f"{url}?" + "&".join(f"modality={value}" for value in values))
    assert response.status_code == 400
    assert f"at most {MAX_VALUES} values, not {len(values)}" in response.content.decode()


def test_more_fields_than_django_parses_are_a_400(client, small_atlas) -> None:
    response = client.get("/api/v1/works/?" + "&".join(["modality=language"] * 1001))
    assert response.status_code == 400


@pytest.mark.parametrize(
    ("body", "depth"),
    [(b"{}", 1), (b'{"a": [[1], {"b": []}]}', 4), (b'["[[[[", "]", "\\"[["]', 1), (b"7", 0)],
)
def test_json_depth_counts_brackets_outside_strings(body, depth) -> None:
    assert json_depth(body) == depth


def _suggestion(client, body: bytes, content_type: str = "application/json"):
    return client.post("/api/v1/suggestions/", data=body, content_type=content_type)


def test_100000_nested_arrays_are_a_400_not_a_recursion_error(client, small_atlas) -> None:
    response = _suggestion(client, b"[" * 100_000)
    assert response.status_code == 400
    assert response.json()["detail"] == f"JSON nested deeper than {MAX_JSON_DEPTH} levels."


def test_nesting_up_to_the_limit_reaches_validation(client, small_atlas) -> None:
    body = b'{"work": ' + b"[" * (MAX_JSON_DEPTH - 1) + b"]" * (MAX_JSON_DEPTH - 1) + b"}"
    response = _suggestion(client, body)
    assert response.status_code == 400 and "work" in response.json()["errors"]


def test_a_body_over_the_limit_is_a_413_naming_it(client, small_atlas) -> None:
    response = _suggestion(client, b"a" * (MAX_BODY_BYTES + 1))
    assert response.status_code == 413
    assert response.json() == {"detail": f"The request body is larger than {MAX_BODY_BYTES} bytes."}


def test_invalid_utf8_in_json_is_a_400(client, small_atlas) -> None:
    response = _suggestion(client, b'{"work": "\xff\xfe"}')
    assert response.status_code == 400 and "JSON parse error" in response.json()["detail"]


def test_the_api_takes_json_bodies_only(client, small_atlas) -> None:
    response = _suggestion(client, b"work=x", "application/x-www-form-urlencoded")
    assert response.status_code == 415
