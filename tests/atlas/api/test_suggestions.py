"""POST /api/v1/suggestions/: anonymous, validated against the vocabularies, throttled."""

import pytest

from atlas.models import Suggestion

pytestmark = pytest.mark.django_db


def _post(client, **fields):
    data = {
        "work": "universal-transformers",
        "field": "depth_control",
        "proposed_value": "exit-gate",
        "rationale": "Section 2.",
        "contact": "me@example.org",
    } | fields
    return client.post("/api/v1/suggestions/", data, content_type="application/json")


def test_a_valid_suggestion_is_queued_for_review(client, small_atlas) -> None:
    response = _post(client)
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "pending" and body["work"] == "universal-transformers"
    assert "contact" not in body
    suggestion = Suggestion.objects.get(pk=body["id"])
    assert (suggestion.field, suggestion.proposed_value) == ("depth_control", "exit-gate")


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"work": "nope"}, "work", "no work with slug 'nope'"),
        ({"field": "slug"}, "field", '"slug" is not a valid choice.'),
        ({"proposed_value": "whenever"}, "proposed_value", "is not an allowed depth_control"),
        ({"field": "month", "proposed_value": "May"}, "proposed_value", "YYYY-MM"),
        ({"rationale": ""}, "rationale", "This field may not be blank."),
    ],
)
def test_an_invalid_suggestion_is_a_400_naming_the_field(
    client, small_atlas, fields, param, message
):
    response = _post(client, **fields)
    assert response.status_code == 400
    assert message in " ".join(response.json()["errors"][param])
    assert not Suggestion.objects.exists()


def test_anonymous_suggestions_are_throttled_with_the_pages_budget(client, small_atlas) -> None:
    # given nine through the page's form
    for _ in range(9):
        client.post(
            "/works/universal-transformers/suggest/",
            {"field": "venue", "proposed_value": "ICLR", "rationale": "r"},
        )
    # when two more come through the API
    statuses = [_post(client).status_code for _ in range(2)]
    # then the tenth is the last one accepted
    assert statuses == [201, 429]
    assert Suggestion.objects.count() == 10


def test_text_fields_take_strings_only(client, small_atlas) -> None:
    response = _post(client, rationale=5, contact=0)
    assert response.status_code == 400
    errors = {"rationale": ["must be a string"], "contact": ["must be a string"]}
    assert response.json()["errors"] == errors
    assert not Suggestion.objects.exists()
