"""Property-based fuzzing of /api/v1/ from its own OpenAPI schema (bounded for CI).

The schema is read from the running app in-process (WSGI) over the small atlas in the
test database, with every check (``--checks all`` in the CLI), positive data acceptance
included: a request the schema allows must not be refused as invalid. The topics and work
slugs it allows come from the database (``atlas/api/schema.py``), so it is loaded per test.

Three writes are left out of positive acceptance only, because the schema cannot state
their rules yet: a suggestion's value depends on the field it corrects (a month, a URL, a
vocabulary), a proposal's facets must satisfy the taxonomy's rules together (and a
duplicate is a 409), and a run's loops depend on the model chosen (its trained loops).
"""

import re
from collections.abc import Callable

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from atlas.models import Work

FIELD_DEPENDENT = {
    ("POST", "/api/v1/suggestions/"),
    ("POST", "/api/v1/proposals/"),
    ("POST", "/api/v1/runs/"),
}


@pytest.fixture
def in_test_transaction():
    """Keep the WSGI handler from closing the test's connection after each request (as
    Django's test client does), so the requests see the test database."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


def _fuzz(operation, excluded: list) -> Callable[[], None]:
    """A Hypothesis test of one operation: its generated requests, all checks but
    ``excluded``."""

    @given(case=operation.as_strategy())
    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,  # the same examples on every run
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def fuzz(case) -> None:
        case.call_and_validate(excluded_checks=excluded)

    return fuzz


@pytest.mark.slow
def test_the_server_accepts_exactly_what_its_schema_states(small_atlas, in_test_transaction):
    # given the schema as served for this data (loaded here: it reads the database)
    schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    failures = []
    for result in schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]  # a bad schema fails the test
        key = (operation.method.upper(), operation.path)
        excluded = [positive_data_acceptance] if key in FIELD_DEPENDENT else []

        # when its generated requests are sent, then each answer is what the schema states
        try:
            _fuzz(operation, excluded)()
        except Exception as exc:  # collect every operation's failure, then report them all
            failures.append(f"{key[0]} {key[1]}: {exc}")
    assert failures == []


def _query_parameters(schema: dict, path: str) -> dict[str, dict]:
    parameters = schema["paths"][path]["get"]["parameters"]
    return {p["name"]: p["schema"] for p in parameters if p["in"] == "query"}


def test_the_schema_bounds_the_parameters_from_the_data(client, small_atlas) -> None:
    # given the topics in use
    topics = sorted({topic for work in Work.objects.all() for topic in work.topics})
    # when
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    works = _query_parameters(schema, "/api/v1/works/")
    compare = _query_parameters(schema, "/api/v1/compare/")["works"]
    # then topics are an enum of them, lists are bounded, and compare needs 1-3 known slugs
    assert works["topics"]["items"]["enum"] == topics and works["topics"]["maxItems"] == 20
    assert works["modality"]["maxItems"] == 20
    assert compare["minLength"] == 1
    pattern = re.compile(compare["pattern"])
    assert pattern.match("universal-transformers") and pattern.match(",".join(small_atlas[:3]))
    assert not pattern.match(",".join(small_atlas[:4])) and not pattern.match("no-such-work")
    assert not pattern.match("")
    suggestion = schema["components"]["schemas"]["SuggestionRequest"]["properties"]["work"]
    assert suggestion["enum"] == sorted(small_atlas)


def test_the_schema_states_the_answers_of_older_endpoints_too(client, small_atlas) -> None:
    # given the schema
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    pinned = schema["paths"]["/api/v1/export/versions/{version}/"]["get"]["responses"]
    compare = schema["paths"]["/api/v1/runs/compare/"]["get"]["responses"]
    # when a pinned export is asked in an unknown format
    response = client.get("/api/v1/export/versions/1/", {"format": "AAA"})
    # then the 400 it answers is stated, and so is the 404 of a run that does not exist
    assert response.status_code == 400 and "400" in pinned
    assert "404" in compare


def test_the_proposals_endpoint_is_stated_exactly(client, small_atlas) -> None:
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    create = schema["paths"]["/api/v1/proposals/"]["post"]
    body = schema["components"]["schemas"]["NewWorkRequest"]
    read = schema["components"]["schemas"]["Proposal"]["properties"]
    assert {"201", "400", "409", "429"} <= set(create["responses"])
    assert set(body["required"]) == {"title", "month", "summary", "recurrence_family", "rationale"}
    assert "contact" in body["properties"] and "contact" not in read
    log = schema["paths"]["/api/v1/proposals/"]["get"]["parameters"]
    status = next(p for p in log if p["name"] == "status")
    assert status["schema"]["enum"] == ["accepted", "pending", "rejected"]
