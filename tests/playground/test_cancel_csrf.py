"""The API's cancel: a page session's cookie authorises it only with the CSRF token, as
the page's own forms need it; the API's cancel token (a header no other site can set)
needs none."""

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from playground.models import Run
from playground.visitors import SESSION_SECRET, secret_hash

pytestmark = pytest.mark.django_db

SESSION = "the-page-sessions-secret"


@pytest.fixture
def browser() -> Client:
    """A browser holding the page session that started a run, and the CSRF cookie the
    page sets; Django checks CSRF as it does for real (the test client skips it)."""
    client = Client(enforce_csrf_checks=True)
    session = client.session
    session[SESSION_SECRET] = SESSION
    session.save()
    client.get("/playground/")  # the page sets the CSRF cookie its forms use
    return client


@pytest.fixture
def page_run(run_factory) -> Run:
    return run_factory(
        status="running", heartbeat_at=timezone.now(), owner_hash=secret_hash(SESSION)
    )


def _cancel(client: Client, run: Run, **headers: str):
    return client.post(f"/api/v1/runs/{run.id}/cancel/", headers=headers)


def test_the_session_cookie_alone_cannot_cancel(browser, page_run) -> None:
    # when another site's form posts with the visitor's cookie (and no token)
    response = _cancel(browser, page_run)
    # then
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    page_run.refresh_from_db()
    assert not page_run.cancel_requested


def test_the_session_with_its_csrf_token_cancels(browser, page_run) -> None:
    # when the page posts with the token from its cookie
    token = browser.cookies[settings.CSRF_COOKIE_NAME].value
    response = _cancel(browser, page_run, X_CSRFToken=token)
    # then
    assert response.status_code == 202
    page_run.refresh_from_db()
    assert page_run.cancel_requested


def test_the_api_cancel_token_needs_no_csrf_token(run_factory) -> None:
    # given a run made through the API, and a client with CSRF checks on and no cookie
    run = run_factory(
        status="running", heartbeat_at=timezone.now(), owner_hash=secret_hash("its-token")
    )
    client = Client(enforce_csrf_checks=True)
    # when
    response = _cancel(client, run, X_Cancel_Token="its-token")
    # then
    assert response.status_code == 202
    run.refresh_from_db()
    assert run.cancel_requested
