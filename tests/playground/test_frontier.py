"""The Frontier view: every model's stored frontier as a chart, a table and a CSV link."""

import json
import shutil

import pytest
from django.conf import settings as django_settings

from tests.playground.conftest import TINY

POINTS = [
    {
        "rule": rule,
        "setting": setting,
        "policy": "best-available",
        "accuracy": acc,
        "loss": 1.0,
        "avg_exit": depth,
        "executed_fraction": frac,
        "latency_ms_per_token": 0.5,
        "latency_ratio": frac,
        "peak_kv_bytes": 1000,
    }
    for rule, setting, acc, depth, frac in [
        ("q-exit", "q=0.5", 0.8, 2.0, 0.5),
        ("q-exit", "q=1.0", 0.9, 4.0, 1.0),
        ("fixed", "k=1", 0.2, 1.0, 0.25),
        ("ponder", "seed=0", 0.7, 2.2, 0.55),
    ]
]


def with_frontier(tmp_path, name: str, metric: str) -> object:
    model = tmp_path / name
    shutil.copytree(TINY, model)
    data = {"metric": metric, "sequences": 8, "loops": 4, "latency": "median", "points": POINTS}
    (model / "frontier.json").write_text(json.dumps(data))
    (model / "frontier.csv").write_text("rule,setting\nq-exit,q=0.5\n")
    (model / "playground.json").write_text(json.dumps({"summary": f"{name} in one line"}))
    return model


@pytest.fixture
def two_models(settings, tmp_path):
    settings.PLAYGROUND_MODELS = {
        "text": with_frontier(tmp_path, "text", "next-token top-1"),
        "task": with_frontier(tmp_path, "task", "exact match"),
        "bare": TINY,
    }


def test_the_page_lists_each_models_points_summary_and_csv(client, two_models):
    response = client.get("/playground/frontier/")

    html = response.content.decode()
    assert response.status_code == 200
    assert html.count('class="frontier-chart"') == 2 and html.count("<tbody>") == 2
    assert "task in one line" in html and "exact match" in html
    assert 'href="/playground/frontier/task.csv"' in html
    assert "No frontier stored for this model yet" in html  # the bare fixture


def test_csv_downloads_and_an_unknown_or_bare_model_is_404(client, two_models):
    response = client.get("/playground/frontier/task.csv")

    assert response.status_code == 200
    assert b"".join(response.streaming_content).startswith(b"rule,setting")
    assert client.get("/playground/frontier/bare.csv").status_code == 404
    assert client.get("/playground/frontier/nowhere.csv").status_code == 404


def test_the_shipped_models_have_stored_frontiers():
    for name in ("pydoc-loop", "hop-loop"):
        stored = json.loads(
            (django_settings.BASE_DIR / "kernels/models" / name / "frontier.json").read_text()
        )
        rules = {p["rule"] for p in stored["points"]}
        assert rules == {"q-exit", "convergence", "fixed", "ponder", "act"}, name


@pytest.mark.browser
@pytest.mark.slow
def test_chromium_renders_both_models_charts_and_tables(browser, live_server, two_models):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{live_server.url}/playground/frontier/")
        page.wait_for_function(
            "() => document.querySelectorAll('.frontier-chart .main-svg').length >= 2",
            timeout=15_000,
        )
        traces = page.evaluate(
            "[...document.querySelectorAll('.frontier-chart')].map(c => c.data.map(t => t.name))"
        )
        rows = page.locator(".frontier-table tbody tr").count()
    finally:
        page.close()

    assert errors == []
    assert (
        traces
        == [["q-exit · best-available", "fixed · best-available", "ponder · best-available"]] * 2
    )
    assert rows == 2 * len(POINTS)
