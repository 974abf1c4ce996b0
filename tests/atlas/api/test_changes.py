"""Versioned data: GET /api/v1/changes/?since=VERSION and exports pinned to a version,
GET /api/v1/export/versions/VERSION/."""

from datetime import timedelta

import pytest
from django.utils import timezone

from atlas.models import AtlasChange, Work
from tests.atlas.conftest import approve_kv

pytestmark = pytest.mark.django_db

SLUG = "universal-transformers"


def test_changes_since_a_version_list_work_field_old_new_when_and_evidence(
    client, small_atlas, curator
) -> None:
    # given the loaded atlas (one version) and one approved correction after it
    loaded = AtlasChange.objects.latest()
    old = Work.objects.get(slug=SLUG).kv_strategy
    corrected = approve_kv(
        curator, evidence_note="Encoder-decoder on algorithmic tasks.", evidence_source="seed 000"
    )
    # when
    body = client.get(f"/api/v1/changes/?since={loaded.pk}").json()
    # then exactly that change is listed, with its basis
    assert body["since"] == loaded.pk and body["data_version_number"] == corrected.pk
    assert body["data_version"] == corrected.at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert body["changes"] == [
        {
            "version": corrected.pk,
            "when": body["changes"][0]["when"],
            "kind": "suggestion",
            "work": SLUG,
            "field": "kv_strategy",
            "old": old,
            "new": "no-kv",
            "evidence": {"note": "Encoder-decoder on algorithmic tasks.", "source": "seed 000"},
        },
        {
            "version": corrected.pk,
            "when": body["changes"][0]["when"],
            "kind": "suggestion",
            "work": SLUG,
            "field": "evidence",
            "old": {},
            "new": {
                "kv_strategy": {
                    "note": "Encoder-decoder on algorithmic tasks.",
                    "source": "seed 000",
                }
            },
            "evidence": None,
        },
    ]
    assert body["count"] == len(body["changes"])
    # and from the beginning, the load added every work
    everything = client.get("/api/v1/changes/").json()["changes"]
    added = [change["work"] for change in everything if change["field"] == "work"]
    assert sorted(added) == sorted(small_atlas)


@pytest.mark.parametrize("fmt", ["json", "csv", "bibtex", "ris"])
def test_an_export_pinned_to_a_version_reproduces_it_exactly(
    client, small_atlas, curator, fmt
) -> None:
    # given an export of the version the load made (a minute ago: a time names the newest
    # change of its second)
    AtlasChange.objects.update(at=timezone.now() - timedelta(minutes=1))
    loaded = AtlasChange.objects.latest()
    before = client.get(f"/api/v1/export/?format={fmt}").content
    # when the data changes and the export is pinned to that version, by number or time
    approve_kv(curator)
    assert client.get(f"/api/v1/export/?format={fmt}").content != before
    by_number = client.get(f"/api/v1/export/versions/{loaded.pk}/?format={fmt}")
    label = loaded.at.strftime("%Y-%m-%dT%H:%M:%SZ")
    by_time = client.get(f"/api/v1/export/versions/{label}/?format={fmt}")
    # then both are byte for byte the export of that version
    assert by_number.status_code == 200 and by_number.content == before
    assert by_time.content == before


@pytest.mark.parametrize(
    ("query", "param", "message"),
    [
        ("export/versions/1/?modality=vision", "modality", "unknown parameter; allowed: format"),
        ("changes/?since=yesterday", "since", "'yesterday' is not a data version"),
        ("changes/?until=3", "until", "unknown parameter; allowed: format, since"),
    ],
)
def test_a_bad_version_is_a_400_naming_it(client, small_atlas, query, param, message) -> None:
    response = client.get(f"/api/v1/{query}")
    assert response.status_code == 400
    assert message in response.json()["errors"][param][0]


def test_an_unknown_version_is_a_404_naming_it(client, small_atlas) -> None:
    response = client.get("/api/v1/export/versions/999999/")
    assert response.status_code == 404
    assert "there is no data version '999999'" in response.json()["detail"]


def test_a_suggestion_names_a_bad_evidence_source(client, small_atlas) -> None:
    data = {
        "work": SLUG,
        "field": "kv_strategy",
        "proposed_value": "no-kv",
        "rationale": "It says so.",
        "evidence_source": "my notes",
    }
    response = client.post("/api/v1/suggestions/", data, content_type="application/json")
    assert response.status_code == 400
    assert "'my notes' is not a source" in response.json()["errors"]["evidence_source"][0]
