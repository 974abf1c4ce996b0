"""The playground in a real Chromium: type a prompt, press Run, watch it stream, stop one.

The page is served by uvicorn (ASGI, as in production), so the SSE stream reaches the
browser token by token; pytest-django's WSGI ``live_server`` would buffer a streaming
async response until its end. The run executes in the embedded mode's way (events
through the database), its service called in a thread where the Celery task would run it.
"""

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection

from playground import services
from playground.models import Run, RunToken
from tests.playground.conftest import TINY

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

GENERATED = "#tokens .tok:not(.prompt)"
HEATMAP_COLUMNS = "document.getElementById('heatmap').data?.[0]?.x?.length ?? 0"


@pytest.fixture
def asgi_server(transactional_db, settings) -> Iterator[str]:
    """The project's ASGI application (with static files) on a free local port."""
    import uvicorn
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
    from django.core.asgi import get_asgi_application

    settings.PLAYGROUND_MODELS = {"ouro-tiny": TINY}
    settings.PLAYGROUND_TOKEN_DELAY_S = 0.04  # slow enough to see the run mid-flight
    settings.REDIS_URL = ""  # the embedded mode: the stream reads the database
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = ASGIStaticFilesHandler(get_asgi_application())
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def worker_thread(monkeypatch) -> Iterator[list[threading.Thread]]:
    """Enqueueing a run executes it in a thread, as a warm worker would."""
    threads: list[threading.Thread] = []

    def execute(run_id) -> None:
        try:
            services.run_execute(run_id=run_id, worker="browser-test")
        finally:
            connection.close()

    def enqueue(*, run: Run) -> None:
        thread = threading.Thread(target=execute, args=(run.id,), daemon=True)
        threads.append(thread)
        thread.start()

    monkeypatch.setattr(services, "run_enqueue", enqueue)
    yield threads
    for thread in threads:
        thread.join(timeout=60)


@pytest.fixture
def page(browser) -> Iterator[object]:
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    yield page
    page.close()


def test_type_a_prompt_run_it_and_watch_tokens_and_heatmap_stream_in(
    asgi_server, worker_thread, page
) -> None:
    # given the playground
    page.goto(f"{asgi_server}/playground/")
    page.get_by_role("textbox", name="Prompt").fill("def add(a, b):")
    page.get_by_label("Max new tokens").fill("48")
    # when Run is pressed
    page.get_by_role("button", name="Run", exact=True).click()
    # then the run's permalink replaces the address, and tokens stream in while it runs
    page.wait_for_url("**/playground/runs/*/")
    page.wait_for_function(f"document.querySelectorAll('{GENERATED}').length >= 3")
    status = page.locator("#run-status").inner_text()
    generated_midway = page.locator(GENERATED).count()
    columns_midway = page.evaluate(HEATMAP_COLUMNS)
    assert status.startswith("Running"), status
    assert 3 <= generated_midway < 48
    assert columns_midway >= 14 + 3  # the 14 prompt bytes, then the generated tokens
    assert page.locator("#heatmap .heatmaplayer image").count() >= 1  # cells drawn
    # and then it finishes with its final stats
    page.wait_for_function(
        "document.getElementById('run-status').textContent.startsWith('Done')", timeout=60_000
    )
    run = Run.objects.get()
    stored = list(RunToken.objects.filter(run=run).order_by("position"))
    assert run.status == Run.Status.DONE
    assert page.locator("#tokens .tok").count() == len(stored) == 14 + 48
    assert page.locator("#tokens").inner_text() == "".join(token.text for token in stored)
    assert page.evaluate(HEATMAP_COLUMNS) == len(stored)
    exits = page.evaluate("document.getElementById('heatmap').data[2].y")
    assert exits == [token.exit_loop for token in stored]
    stats = {
        name: page.locator(f'[data-stat="{name}"]').inner_text()
        for name in ("tokens", "average_depth", "work", "flops", "tokens_per_s", "ttft", "peak_kv")
    }
    assert stats["tokens"] == "14 prompt + 48 generated"
    assert "of 4 loops" in stats["average_depth"]
    assert "token-loops" in stats["work"] and "of full depth" in stats["flops"]
    assert stats["ttft"].endswith(" ms") and stats["peak_kv"] != "—"
    assert float(stats["tokens_per_s"]) > 0
    # a token's tooltip shows each computed loop, and the skipped ones as not computed
    last = page.locator(GENERATED).last
    last.hover()
    tip = page.locator("#token-tip")
    tip.wait_for(state="visible")
    assert "exit loop" in tip.inner_text()
    assert tip.locator("tbody tr").count() == 4
    assert tip.locator("tbody tr:not(.skipped)").count() == stored[-1].loops_computed
    # the recent runs list has it, and the permalink replays it after a reload
    page.locator("#recent-runs").get_by_text("def add(a, b):").wait_for()
    page.reload()
    page.wait_for_function(f"{HEATMAP_COLUMNS} === {len(stored)}")
    assert page.locator("#tokens .tok").count() == len(stored)
    # Back returns to the empty prompt page, Forward to the run, drawn again
    page.go_back()
    page.wait_for_url(f"{asgi_server}/playground/")
    page.get_by_role("heading", name="Output").wait_for()  # the page fetched again
    assert page.locator("#run #tokens .tok").count() == 0
    page.go_forward()
    page.wait_for_function(f"{HEATMAP_COLUMNS} === {len(stored)}")
    assert page.locator("#tokens .tok").count() == len(stored)
    assert page.errors == []


def test_stop_cancels_a_running_run(asgi_server, worker_thread, page) -> None:
    page.goto(f"{asgi_server}/playground/")
    page.get_by_role("textbox", name="Prompt").fill("Stop me")
    page.get_by_label("Max new tokens").fill("256")
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_function(f"document.querySelectorAll('{GENERATED}').length >= 2")
    page.get_by_role("button", name="Stop").click()
    page.wait_for_function(
        "document.getElementById('run-status').textContent.startsWith('Stopped')",
        timeout=30_000,
    )
    run = Run.objects.get()
    assert run.status == Run.Status.CANCELLED
    assert page.locator(GENERATED).count() == run.tokens.filter(phase="generated").count() < 256
    assert page.get_by_role("button", name="Stop").count() == 0
    assert page.errors == []
