"""The Frontier view: every model's stored frontier as a chart, a table and a CSV link."""

import json
import re
import shutil
from html import escape as html_escape
from html import unescape as html_unescape

import pytest
from django.conf import settings as django_settings

from playground.frontier import point_label
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


def _calibration(setting: str, after: int, at: int, before: int, wasted: int) -> dict:
    n = after + at + before
    shares = {"after_share": after / n, "at_share": at / n, "before_share": before / n}
    return {
        "rule": "q-exit",
        "setting": setting,
        "policy": "best-available",
        "default": setting == "q=0.5",
        "accuracy": 0.8,
        "executed_fraction": 0.5,
        "positions": n,
        "after": after,
        "at": at,
        "before": before,
        "wasted_loops": wasted,
        "executed_loops": 40,
        "wasted_share": wasted / 40,
        "before_changed": before // 2,
    } | shares


CALIBRATION = [_calibration("q=0.5", 4, 10, 6, 5), _calibration("q=1.0", 14, 6, 0, 30)]
CALIBRATION[0]["by_level"] = [
    {"level": 1} | _calibration("q=0.5", 1, 6, 3, 1),
    {"level": 2} | _calibration("q=0.5", 3, 4, 3, 4),
]
DEPTH = {
    "settling": {"positions": 20, "mean": 2.1, "histogram": [8, 5, 4, 3]},
    "levels": "hops",
    "calibration": CALIBRATION,
    "oracle": [
        {
            "policy": p,
            "agreement": a,
            "accuracy": 0.9,
            "executed_fraction": f,
            "peak_kv_bytes": 4096,
        }
        for p, a, f in [("best-available", 0.97, 0.52), ("select", 1.0, 1.0)]
    ],
    "policies": [
        {"setting": "q=1.0", "policy": p, "agreement": a, "accuracy": c, "executed_fraction": 1.0}
        | {"peak_kv_bytes": kv}
        for p, a, c, kv in [("best-available", 1.0, 0.9, 8192), ("exit-kv", 0.99, 0.89, 2048)]
    ],
}


def with_frontier(tmp_path, name: str, metric: str) -> object:
    model = tmp_path / name
    shutil.copytree(TINY, model)
    data = {"metric": metric, "sequences": 8, "loops": 4, "latency": "median", "points": POINTS}
    data |= DEPTH
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


@pytest.mark.django_db  # ordered before the browser tests, whose event loop outlives them
def test_the_page_lists_each_models_points_summary_and_csv(client, two_models):
    response = client.get("/playground/frontier/")

    html = response.content.decode()
    assert response.status_code == 200
    assert html.count('class="frontier-chart"') == 2 * 2
    assert html.count('<table class="frontier-table"') == 2
    assert "task in one line" in html and "exact match" in html
    assert 'href="/playground/frontier/task.csv"' in html
    assert "No frontier stored for this model yet" in html  # the bare fixture


@pytest.mark.django_db  # ordered before the browser tests, whose event loop outlives them
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


FRONTIER = {"loops": 6, "decoding": "greedy", "new_tokens": 2}
MEASURED = {"loops": "6", "decoding": "greedy", "max_new_tokens": "2"}


@pytest.mark.parametrize(
    ("point", "fields"),
    [
        ({"rule": "q-exit", "setting": "q=0.5", "policy": "select"}, {"q": "0.5"}),
        ({"rule": "convergence", "setting": "kl<0.001"}, {"kl_threshold": "0.001"}),
        ({"rule": "fixed", "setting": "k=3"}, {"loops": "3"}),
        ({"rule": "act", "setting": "eps=0.01"}, {"act_eps": "0.01"}),
        ({"rule": "ponder", "setting": "seed=2"}, {"seed": "2"}),
        ({"rule": "q-exit", "setting": "something else"}, {}),
    ],
)
def test_a_points_setting_becomes_the_forms_fields(point, fields):
    from playground.frontier import point_settings

    expected = {"exit_rule": point["rule"], **MEASURED, **fields}
    if "policy" in point:
        expected["kv_policy"] = point["policy"]
    assert point_settings(point, FRONTIER) == expected


@pytest.mark.django_db
def test_each_row_links_to_try_its_setting_in_the_prefilled_form(client, two_models):
    # given the frontier page with every point
    html = client.get("/playground/frontier/?points=all").content.decode()
    # then each point of a model with a frontier links to the playground with its setting
    assert html.count(">try this setting</a>") == 2 * len(POINTS)
    link = (
        "/playground/?model=task&amp;exit_rule=fixed&amp;kv_policy=best-available&amp;loops=1"
        "&amp;decoding=greedy&amp;frontier_point=fixed+k%3D1+%C2%B7+best-available"
    )
    assert f'href="{link}"' in html
    # and following a link fills the form with it, and says where it came from
    form = client.get(link.replace("&amp;", "&")).content.decode()
    assert '<option value="task" selected' in form
    assert '<option value="fixed" selected' in form
    assert 'name="loops" value="1"' in form
    assert "Settings of frontier point <strong>fixed k=1 · best-available</strong>" in form


def _expected_run(model: str, frontier: dict, point: dict) -> dict:
    """The run parameters a point was measured with, read from the point by hand."""
    name, _, value = point["setting"].replace("kl<", "kl=").partition("=")
    expected = {
        "model": model,
        "exit_rule": point["rule"],
        "kv_policy": point["policy"],
        "loops": frontier["loops"],
        "extrapolate": False,
        "max_new_tokens": frontier["new_tokens"],
        "temperature": 0.0,  # greedy, as the sweep decodes
    }
    if name == "k":
        expected |= {"loops": int(value), "fixed_loops": int(value)}
    else:
        field = {"q": "q", "kl": "kl_threshold", "eps": "act_eps", "seed": "seed"}[name]
        expected[field] = int(value) if name == "seed" else float(value)
    return expected


def _submitted(form) -> dict:
    """What the browser posts for a form as it was rendered (its initial values)."""
    values = {name: form[name].value() for name in form.fields}  # 0 == False: keep ints
    values = {name: str(v) if type(v) in (int, float) else v for name, v in values.items()}
    return {name: value for name, value in values.items() if value not in (None, False, "")}


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["pydoc-loop", "hop-loop"])
def test_every_shipped_frontier_point_links_to_a_form_that_runs_exactly_it(client, name):
    # given the shipped model's stored frontier and its page's links
    from playground.checkpoints import model_frontier, model_get
    from playground.forms import RunForm

    model = model_get(name=name)
    assert model is not None
    frontier = model_frontier(model=model)
    assert frontier is not None
    page = client.get("/playground/frontier/?points=all").content.decode()
    section = page.split(f"<code>{name}</code>")[1]
    links = re.findall(r'<a href="([^"]+)">try this setting</a>', section.split("</section>")[0])
    assert len(links) == len(frontier["points"]) > 50
    for link, point in zip(links, frontier["points"], strict=True):
        # when a visitor follows the point's link and presses Run as the form stands
        response = client.get(html_unescape(link))
        form = RunForm(_submitted(response.context["form"]))
        # then the run's settings are the point's, whatever the model's own defaults
        assert form.is_valid(), (point, form.errors)
        run = form.run_parameters()
        expected = _expected_run(name, frontier, point)
        assert {key: run[key] for key in expected} == expected, point
        # and the form names the point it came from
        assert f"Settings of frontier point <strong>{html_escape(point_label(point))}" in (
            response.content.decode()
        )


@pytest.mark.django_db
def test_a_link_naming_a_model_starts_from_that_models_defaults(client):
    # given the default model is the tiny fixture (greedy, 64 tokens) and hop-loop asks
    # for q = 0.7 and 2 new tokens while pydoc-loop asks for seeded sampling
    # when a link names only the model
    hop = client.get("/playground/?model=hop-loop").context["form"]
    pydoc = client.get("/playground/?model=pydoc-loop").context["form"]
    # then each form starts from that model's settings
    assert (hop["loops"].value(), hop["max_new_tokens"].value()) == (6, 2)
    assert hop["decoding"].value() == "greedy"
    assert (pydoc["loops"].value(), pydoc["decoding"].value()) == (4, "sample")
    assert (pydoc["temperature"].value(), pydoc["top_p"].value()) == (0.8, 0.95)


@pytest.mark.django_db
def test_the_table_starts_with_the_pareto_points_against_full_depth(client, two_models):
    # given points where ponder (0.55 of the work, 0.7) is beaten by q = 0.5 (0.5, 0.8)
    html = client.get("/playground/frontier/").content.decode()
    # then the table lists the other three, and says how to see all four
    section = html.split("<code>task</code>")[1].split("</section>")[0]
    rows = re.findall(r'<th scope="row" data-label="setting" data-value="([^"]+)"', section)
    assert rows == ["q-exit q=0.5", "q-exit q=1.0", "fixed k=1"]
    assert "The 3 Pareto points of 4" in section and "Show all 4 points" in section
    # and each states its accuracy against full depth (q = 1: 0.9), and KV in bytes people read
    assert 'data-label="Δ vs full depth" data-value="-0.1">-0.100<' in section
    assert '<span class="badge">full depth</span>' in section
    assert ">1000 B<" in section


def test_pareto_points_are_those_no_point_beats_on_both_accuracy_and_work():
    from playground.frontier import pareto_keys

    points = [
        {"accuracy": 0.5, "executed_fraction": 0.5},
        {"accuracy": 0.5, "executed_fraction": 0.6},  # same accuracy, more work
        {"accuracy": 0.4, "executed_fraction": 0.3},
        {"accuracy": 0.9, "executed_fraction": 1.0},
        {"accuracy": 0.9, "executed_fraction": 1.0},  # a tie: neither beats the other
        {"accuracy": 0.3, "executed_fraction": 0.4},  # beaten by the 0.4 at 0.3
    ]
    assert pareto_keys(points) == {0, 2, 3, 4}


def test_a_ratio_reads_as_its_median_and_the_range_of_its_repeats():
    from playground.frontier import frontier_rows

    point = POINTS[0] | {"latency_ratio_low": 0.41, "latency_ratio_high": 0.58, "decode_ratio": 1}
    (row,) = frontier_rows({"points": [point | {"peak_kv_bytes": 15_079_936}]})
    assert row["prefill"] == "0.50× (0.41–0.58)" and row["decode"] == "1.00×"
    assert row["peak_kv"] == "14.4 MiB"


@pytest.mark.browser
@pytest.mark.slow
def test_chromium_renders_both_models_charts_and_tables(browser, live_server, two_models):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{live_server.url}/playground/frontier/")
        page.wait_for_function(
            "() => document.querySelectorAll('.frontier-chart .main-svg').length >= 4",
            timeout=15_000,
        )
        traces = page.evaluate(
            "[...document.querySelectorAll('.frontier-chart')].map(c => c.data.map(t => t.name))"
        )
        rows = page.locator(".frontier-table tbody tr").count()
        # the headers sort the table: accuracy, then reversed
        table = page.locator("#frontier-1 .frontier-table")
        table.get_by_role("button", name="exact match").click()
        first = "document.querySelector('#frontier-1 tbody tr th').dataset.value"
        ascending = page.evaluate(first)
        table.get_by_role("button", name="exact match").click()
        descending = page.evaluate(first)
        # and on a phone the page does not scroll sideways
        page.set_viewport_size({"width": 390, "height": 800})
        page.wait_for_timeout(300)
        width = page.evaluate("document.documentElement.scrollWidth")
    finally:
        page.close()

    assert errors == []
    rules = ["q-exit · best-available", "fixed · best-available", "ponder · best-available"]
    assert traces == [["Pareto envelope", *rules], rules] * 2  # work view, latency view
    assert rows == 2 * 3  # the Pareto points
    assert (ascending, descending) == ("fixed k=1", "q-exit q=1.0")
    assert width <= 390


@pytest.mark.browser
@pytest.mark.slow
def test_clicking_a_point_opens_the_playground_with_its_setting(browser, live_server, two_models):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    try:
        page.goto(f"{live_server.url}/playground/frontier/")
        point = page.locator("#frontier-0 .scatterlayer .point").first
        point.wait_for()
        box = point.bounding_box()
        assert box is not None
        centre = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.move(*centre)  # Plotly's hover picks the point the click then reports
        page.mouse.click(*centre)
        page.wait_for_url("**/playground/?model=text&exit_rule=q-exit*")
        assert page.get_by_label("Exit rule").input_value() == "q-exit"
        assert page.get_by_label("Model").input_value() == "text"
    finally:
        page.close()


@pytest.mark.django_db
def test_the_page_shows_each_models_calibration_oracle_and_kv_policies(client, two_models):
    html = client.get("/playground/frontier/").content.decode()

    # then each stored model has its calibration table, by hops, and the oracle rows
    for slug in ("frontier-0", "frontier-1"):
        section = html.split(f'id="{slug}"')[1].split("</section>\n</section>")[0]
        assert f'id="{slug}-calibration"' in section  # the chart's rows (json_script)
        assert "Gate calibration of" in section and "by hops" in section
        assert 'q-exit q=0.5 <span class="badge">default</span>' in section
        assert '<td data-label="after">20%</td>' in section  # 4 of 20 positions
        assert '<td data-label="before, prediction changed">3 of 6</td>' in section
        assert '<td data-label="agreement">0.9700</td>' in section  # the oracle's
        assert "exit-kv" in section and "2.0 KiB" in section
    assert "How much depth was needed" not in html.split('id="frontier-2"')[1]  # bare


@pytest.mark.browser
@pytest.mark.slow
def test_chromium_draws_both_models_calibration_chart_and_table(browser, live_server, two_models):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{live_server.url}/playground/frontier/")
        page.wait_for_function(
            "() => document.querySelectorAll('.calibration-chart .main-svg').length >= 2",
            timeout=15_000,
        )
        charts = page.evaluate(
            "[...document.querySelectorAll('.calibration-chart')].map(c => c.data.map("
            "t => [t.name, t.y, t.x]))"
        )
        bars = page.locator(".calibration-chart .bars .point").count()
        tables = [
            page.locator(f"#frontier-{i} .calibration-table").first.locator("tbody tr").count()
            for i in (0, 1)
        ]
        page.set_viewport_size({"width": 390, "height": 800})
        page.wait_for_timeout(300)
        width = page.evaluate("document.documentElement.scrollWidth")
    finally:
        page.close()

    assert errors == []
    assert len(charts) == 2
    for chart in charts:  # after, at, before: each a share per setting, stacked to 1
        assert [name.split(" ")[0] for name, _, _ in chart] == ["after", "at", "before"]
        assert chart[0][1] == ["q-exit q=0.5 ★", "q-exit q=1.0"]
        for i in range(2):
            assert sum(x[i] for _, _, x in chart) == pytest.approx(1.0)
        assert [x for _, _, x in chart][0] == [0.2, 0.7]
    assert bars >= 2 * 5  # 3 traces x 2 settings per chart, the zero "before" bar may hide
    assert tables == [2, 2]
    assert width <= 390
