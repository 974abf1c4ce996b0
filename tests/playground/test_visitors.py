"""Fairness and ownership: per-visitor limits, and only a run's creator stops it."""

from unittest import mock

import pytest
from django.test import Client

from playground import services
from playground.models import Run
from playground.visitors import secret_hash
from tests.playground.conftest import PROMPT
from tests.playground.test_pages import _form

RUNS = "/api/v1/runs/"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_broker():
    with mock.patch.object(services, "run_enqueue"):
        yield


def submit(client: Client, address: str = "10.0.0.1", **headers: str):
    return client.post(
        RUNS,
        {"prompt": PROMPT, "max_new_tokens": 4},
        content_type="application/json",
        REMOTE_ADDR=address,
        headers=headers,
    )


def test_only_the_token_returned_at_creation_stops_an_api_run():
    # given
    created = submit(Client())
    run_id, token = created.json()["id"], created.json()["cancel_token"]
    cancel = f"{RUNS}{run_id}/cancel/"

    # when
    anonymous = Client().post(cancel)
    wrong = Client().post(cancel, headers={"X-Cancel-Token": token + "x"})
    owner = Client().post(cancel, headers={"X-Cancel-Token": token})

    # then
    assert created.status_code == 201 and len(token) >= 40
    assert (anonymous.status_code, wrong.status_code, owner.status_code) == (403, 403, 202)
    assert "cancel_token" in anonymous.json()["detail"]
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.CANCELLED
    assert run.owner_hash == secret_hash(token) and token not in str(vars(run))
    assert "cancel_token" not in Client().get(f"{RUNS}{run_id}/").json()


def test_a_page_run_is_stopped_by_its_session_only_and_stays_public():
    # given
    owner, other = Client(), Client()
    owner.post("/playground/", _form())
    run = Run.objects.get()
    stop = f"/playground/runs/{run.id}/stop/"

    # when
    refused = other.post(stop)
    refused_api = other.post(f"{RUNS}{run.id}/cancel/")
    viewed = other.get(run.get_absolute_url())
    exported = other.get(f"{RUNS}{run.id}/tokens/")
    stopped = owner.post(stop)

    # then
    assert (refused.status_code, refused_api.status_code) == (403, 403)
    assert (viewed.status_code, exported.status_code) == (200, 200)
    assert stopped.status_code == 302
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED and run.visitor.startswith("session:")


def test_a_visitor_over_its_active_runs_gets_429_while_others_still_submit(settings):
    # given
    settings.PLAYGROUND_VISITOR_ACTIVE = 2
    flooder, other = Client(), Client()

    # when
    codes = [submit(flooder, "10.0.0.1").status_code for _ in range(3)]
    refused = submit(flooder, "10.0.0.1")
    others = submit(other, "10.0.0.2")

    # then
    assert codes == [201, 201, 429]
    assert "PLAYGROUND_VISITOR_ACTIVE" in refused.json()["detail"]
    assert others.status_code == 201
    assert Run.objects.filter(visitor="address:10.0.0.1").count() == 2


def test_a_stopped_run_frees_the_visitors_slot(settings):
    # given
    settings.PLAYGROUND_VISITOR_ACTIVE = 1
    client = Client()
    token = submit(client).json()["cancel_token"]
    run = Run.objects.get()

    # when
    client.post(f"{RUNS}{run.id}/cancel/", headers={"X-Cancel-Token": token})

    # then
    assert submit(client).status_code == 201


def test_the_submit_rate_is_a_429_naming_the_limit(settings):
    # given
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {
        "DEFAULT_THROTTLE_RATES": {"playground_submits": "3/minute"}
    }
    settings.PLAYGROUND_VISITOR_ACTIVE = 100
    client = Client()

    # when
    codes = [submit(client).status_code for _ in range(4)]
    refused = submit(client)
    other = submit(Client(), "10.0.0.9")

    # then
    assert codes == [201, 201, 201, 429]
    assert "3/minute" in refused.json()["detail"]
    assert "PLAYGROUND_VISITOR_SUBMITS" in refused.json()["detail"]
    assert other.status_code == 201


def test_page_and_api_share_the_submit_rate_of_an_address(settings):
    # given
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {
        "DEFAULT_THROTTLE_RATES": {"playground_submits": "1/minute"}
    }
    submit(Client(), "127.0.0.1")

    # when a new session from the same address submits from the page
    response = Client().post("/playground/", _form())

    # then
    assert response.status_code == 429
    assert "PLAYGROUND_VISITOR_SUBMITS" in response.content.decode()


@pytest.mark.parametrize("num_proxies", [0])
def test_a_spoofed_forwarded_for_does_not_reset_a_limit(settings, num_proxies):
    # given
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {"NUM_PROXIES": num_proxies}
    settings.PLAYGROUND_VISITOR_ACTIVE = 1
    client = Client()
    assert submit(client, "10.0.0.1", **{"X-Forwarded-For": "1.1.1.1"}).status_code == 201

    # when
    spoofed = [
        submit(client, "10.0.0.1", **{"X-Forwarded-For": f"1.1.1.{n}"}).status_code
        for n in range(2, 6)
    ]

    # then
    assert spoofed == [429] * 4
    assert set(Run.objects.values_list("visitor", flat=True)) == {"address:10.0.0.1"}


def test_a_configured_proxy_count_identifies_clients_by_the_forwarded_address(settings):
    # given one proxy in front, which appends the client's address
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {"NUM_PROXIES": 1}
    settings.PLAYGROUND_VISITOR_ACTIVE = 1
    client = Client()

    # when
    first = submit(client, "10.9.9.9", **{"X-Forwarded-For": "6.6.6.6, 203.0.113.1"})
    same = submit(client, "10.9.9.9", **{"X-Forwarded-For": "7.7.7.7, 203.0.113.1"})
    other = submit(client, "10.9.9.9", **{"X-Forwarded-For": "203.0.113.2"})

    # then: the entry the proxy wrote counts, what the client made up before it does not
    assert (first.status_code, same.status_code, other.status_code) == (201, 429, 201)
