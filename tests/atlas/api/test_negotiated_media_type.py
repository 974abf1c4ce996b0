"""One URL, several representations chosen by ``Accept``: each has its own validator and its
own cached answer, so a client never gets (or keeps) the wrong format."""

import csv
import io
import json

import pytest

pytestmark = pytest.mark.django_db

URL = "/api/v1/export/"
CSV, JSON, BIBTEX = "text/csv", "application/json", "application/x-bibtex"


def test_each_negotiated_media_type_has_its_own_etag(client, small_atlas) -> None:
    etags = {accept: client.get(URL, headers={"Accept": accept})["ETag"] for accept in (CSV, JSON)}
    assert etags[CSV] != etags[JSON]


def test_a_validator_of_one_format_does_not_revalidate_another(client, small_atlas) -> None:
    # given a client that holds the CSV answer
    etag = client.get(URL, headers={"Accept": CSV})["ETag"]
    # when it asks for BibTeX with the CSV validator
    response = client.get(URL, headers={"Accept": BIBTEX, "If-None-Match": etag})
    # then it gets BibTeX, not a 304 that would keep its CSV
    assert response.status_code == 200
    assert response["Content-Type"].startswith(BIBTEX)
    assert response.content.decode().startswith("@comment{Loop Atlas export")


def test_a_cached_answer_is_only_served_for_its_own_format(client, small_atlas) -> None:
    # given the CSV answer rendered and cached
    first = client.get(URL, headers={"Accept": CSV})
    rows = list(csv.DictReader(io.StringIO(first.content.decode())))
    # when the same URL is asked for as JSON
    response = client.get(URL, headers={"Accept": JSON})
    # then the answer is the JSON document, with its own type, for the same works
    assert response["Content-Type"].startswith(JSON)
    document = json.loads(response.content)
    assert {work["slug"] for work in document["works"]} == {row["slug"] for row in rows}
    # and the CSV answer is still served to a CSV client
    assert client.get(URL, headers={"Accept": CSV}).content == first.content
