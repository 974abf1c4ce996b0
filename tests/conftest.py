"""Fixtures shared by the whole suite: real services, a real browser, and a database that
several threads may write to at once (the gpu marker is tests/kernels' own).

Tests that need Redis or Chromium skip on a machine without them, with the reason,
unless REQUIRE_SERVICES=1 / REQUIRE_BROWSER=1 (as in CI), where their absence fails.
"""

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections
from django.db.utils import load_backend

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def _missing(what: str, required_by: str) -> None:
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{what} is not available but {required_by}=1")
    pytest.skip(f"{what} is not available (set {required_by}=1 to make this a failure)")


@pytest.fixture(autouse=True)
def export_store(settings, tmp_path: Path) -> Path:
    """Each test's own export store: no test finds a file stored from another's data."""
    settings.EXPORT_STORE_DIR = tmp_path / "exports"
    return settings.EXPORT_STORE_DIR


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> list[float]:
    """The throttles' clock, held still until a test moves it: the requests of a test
    fall in one rate window, wherever the wall clock's window boundaries lie."""
    from rest_framework.throttling import SimpleRateThrottle

    now = [time.time()]
    monkeypatch.setattr(SimpleRateThrottle, "timer", staticmethod(lambda: now[0]))
    return now


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The real Redis server's URL (a database of its own, flushed by the tests that use it)."""
    import redis

    url = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.exceptions.ConnectionError:
        _missing(f"Redis at {url}", "REQUIRE_SERVICES")
    return url


@pytest.fixture
def server_drops_our_connection():
    """Ends this thread's database connection from the server side, as a PostgreSQL
    restart does (skips on SQLite); a connection still dead is closed after the test."""
    from django.conf import settings
    from django.db import connection

    if not settings.USING_POSTGRES:
        pytest.skip("the server ends a connection: PostgreSQL")
    import psycopg

    from tests.playground.stack import database_url_of

    def drop() -> None:
        connection.ensure_connection()
        pid = connection.connection.info.backend_pid
        url = database_url_of(connection.settings_dict)
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])

    yield drop
    connection.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """A headless Debian Chromium driven by Playwright (never a downloaded browser).

    Per module: Playwright's sync API keeps an event loop running in the main thread
    while it lives, and Django cannot adapt its async middleware (ServeStatic) to a sync
    test client under a running loop, so the loop must not outlive the browser tests.
    """
    if not shutil.which(CHROMIUM) and not os.path.exists(CHROMIUM):
        _missing(f"Chromium at {CHROMIUM}", "REQUIRE_BROWSER")
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        # Playwright's loop makes Django think the ORM runs in async code; only while it lives
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def deployed_database(settings, tmp_path):
    """On SQLite, a migrated database file with the deployed settings (WAL, IMMEDIATE
    transactions, a busy timeout) for this test's every thread; PostgreSQL as it is."""
    if settings.USING_POSTGRES:
        yield
        return
    memory = connections["default"]
    deployed = memory.settings_dict | {"NAME": str(tmp_path / "db.sqlite3")}
    connections.settings["default"] = deployed  # what each new thread's connection uses
    connections["default"] = load_backend(deployed["ENGINE"]).DatabaseWrapper(deployed)
    try:
        call_command("migrate", verbosity=0)
        yield
    finally:
        connections["default"].close()
        connections.settings["default"] = memory.settings_dict
        connections["default"] = memory
