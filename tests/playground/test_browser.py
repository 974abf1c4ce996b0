"""The playground in a real Chromium: type a prompt, press Run, watch it stream, stop one.

The stack is the embedded mode as ``make run`` starts it (``tests/playground/stack.py``):
uvicorn serving the ASGI app, so the SSE stream reaches the browser token by token, and a
real Celery worker process running the tiny checkpoint, sharing a SQLite database file
(events flow through it). A small delay per token lets the test see a run mid-flight.
"""

import re
from collections.abc import Iterator

import pytest

from tests.playground.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GENERATED = "#tokens .tok:not(.prompt)"
HEATMAP_COLUMNS = "document.getElementById('heatmap').data?.[0]?.x?.length ?? 0"


@pytest.fixture(scope="module")
def served(browser, tmp_path_factory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("playground-browser")
    stack = Stack(workdir, database_url=f"sqlite:///{workdir / 'db.sqlite3'}")
    stack.env["PLAYGROUND_TOKEN_DELAY_S"] = "0.04"  # slow enough to see the run mid-flight
    # No test here kills a worker: a heartbeat late on a loaded machine is no failure.
    stack.env["PLAYGROUND_STALE_AFTER_S"] = "60"
    stack.manage("migrate", "--noinput")
    try:
        yield stack.start()
    finally:
        stack.stop()


def _run_of(stack: Stack, page) -> dict:
    found = re.search(r"/playground/runs/([0-9a-f-]{36})/", page.url)
    assert found, f"not a run page: {page.url}"
    return stack.get(f"/api/v1/runs/{found[1]}/").json()


@pytest.fixture
def page(browser) -> Iterator[object]:
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    yield page
    page.close()


def test_type_a_prompt_run_it_and_watch_tokens_and_heatmap_stream_in(served, page) -> None:
    # given the playground
    page.goto(f"{served.base}/playground/")
    page.get_by_role("textbox", name="Prompt").fill("def add(a, b):")
    page.get_by_label("Model").select_option("ouro-tiny")  # byte tokens: 14 for the prompt
    page.get_by_label("Max new tokens").fill("48")
    # when Run is pressed
    page.get_by_role("button", name="Run", exact=True).click()
    # then the run's permalink replaces the address, and tokens stream in while it runs
    page.wait_for_url("**/playground/runs/*/")
    # (the heatmap redraws once per animation frame, so it may trail the text a little)
    page.wait_for_function(
        f"() => document.querySelectorAll('{GENERATED}').length >= 3"
        f" && ({HEATMAP_COLUMNS}) >= 14 + 3"  # the 14 prompt bytes, then generated tokens
    )
    status = page.locator("#run-status").inner_text()
    generated_midway = page.locator(GENERATED).count()
    assert status.startswith("Running"), status
    assert 3 <= generated_midway < 48
    assert page.locator("#heatmap .heatmaplayer image").count() >= 1  # cells drawn
    # and then it finishes with its final stats
    page.wait_for_function(
        "() => document.getElementById('run-status').textContent.startsWith('Done')", timeout=60_000
    )
    run = _run_of(served, page)
    stored = served.get(run["tokens_url"]).json()
    assert run["status"] == "done"
    assert page.locator("#tokens .tok").count() == len(stored) == 14 + 48
    assert page.locator("#tokens").inner_text() == "".join(token["text"] for token in stored)
    assert page.evaluate(HEATMAP_COLUMNS) == len(stored)
    exits = page.evaluate("document.getElementById('heatmap').data[2].y")
    assert exits == [token["exit_loop"] for token in stored]
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
    assert tip.locator("tbody tr:not(.skipped)").count() == stored[-1]["loops_computed"]
    # the recent runs list has it, and the permalink replays it after a reload
    page.locator("#recent-runs").get_by_text("def add(a, b):").first.wait_for()
    page.reload()
    page.wait_for_function(f"() => {HEATMAP_COLUMNS} === {len(stored)}")
    assert page.locator("#tokens .tok").count() == len(stored)
    # Back returns to the empty prompt page, Forward to the run, drawn again
    page.go_back()
    page.wait_for_url(f"{served.base}/playground/")
    page.get_by_role("heading", name="Output").wait_for()  # the page fetched again
    assert page.locator("#run #tokens .tok").count() == 0
    page.go_forward()
    page.wait_for_function(f"() => {HEATMAP_COLUMNS} === {len(stored)}")
    assert page.locator("#tokens .tok").count() == len(stored)
    assert page.errors == []


def test_stop_cancels_a_running_run(served, page) -> None:
    page.goto(f"{served.base}/playground/")
    page.get_by_role("textbox", name="Prompt").fill("Stop me")
    page.get_by_label("Max new tokens").fill("256")
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_function(f"() => document.querySelectorAll('{GENERATED}').length >= 2")
    page.get_by_role("button", name="Stop").click()
    page.wait_for_function(
        "() => document.getElementById('run-status').textContent.startsWith('Stopped')",
        timeout=30_000,
    )
    run = _run_of(served, page)
    stored = served.get(run["tokens_url"]).json()
    assert run["status"] == "cancelled"
    generated = [token for token in stored if token["phase"] == "generated"]
    assert page.locator(GENERATED).count() == len(generated) < 256
    assert page.get_by_role("button", name="Stop").count() == 0
    assert page.errors == []


def test_reloading_a_running_run_replays_what_is_stored_and_follows_the_rest(served, page) -> None:
    # given a run streaming into the page
    page.goto(f"{served.base}/playground/")
    page.get_by_role("textbox", name="Prompt").fill("Reload me")
    page.get_by_label("Max new tokens").fill("160")  # at least 6.4 s: still running at reload
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_function(f"() => document.querySelectorAll('{GENERATED}').length >= 3")
    # when its permalink is reloaded mid-run
    streams: list[str] = []
    page.on(
        "request", lambda request: streams.append(request.url) if "/events" in request.url else None
    )
    page.reload()
    # then it resumes after the stored tokens and ends with each token exactly once
    page.wait_for_function(
        "() => document.getElementById('run-status').textContent.startsWith('Done')", timeout=60_000
    )
    run = _run_of(served, page)
    stored = served.get(run["tokens_url"]).json()
    assert any("last_event_id=" in url for url in streams), streams
    positions = page.evaluate(
        "[...document.querySelectorAll('#tokens .tok')].map(t => Number(t.dataset.position))"
    )
    assert positions == [token["position"] for token in stored]
    assert page.evaluate(HEATMAP_COLUMNS) == len(stored)
    assert page.errors == []


def test_two_visitors_submit_at_once_and_both_pages_stream_to_the_end(served, browser) -> None:
    # given two visitors (browser contexts: separate sessions) on the playground
    contexts = [browser.new_context(viewport={"width": 1280, "height": 1000}) for _ in "ab"]
    pages = [context.new_page() for context in contexts]
    errors: list[str] = []
    for page, prompt in zip(pages, ("def first(a):", "def second(b):"), strict=True):
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{served.base}/playground/")
        page.get_by_role("textbox", name="Prompt").fill(prompt)
        page.get_by_label("Model").select_option("ouro-tiny")
        page.get_by_label("Max new tokens").fill("32")
    try:
        # when both press Run at the same time
        for page in pages:
            page.get_by_role("button", name="Run", exact=True).click(no_wait_after=True)
        # then each page streams its own run to the end
        runs = []
        for page in pages:
            page.wait_for_url("**/playground/runs/*/")
            page.wait_for_function(
                "() => /^(Done|Failed|Stopped)/"
                ".test(document.getElementById('run-status').textContent)",
                timeout=90_000,
            )
            run = _run_of(served, page)
            stored = served.get(run["tokens_url"]).json()
            assert run["status"] == "done", run["error"]
            assert page.locator("#tokens .tok").count() == len(stored)
            assert page.locator("#tokens").inner_text() == "".join(t["text"] for t in stored)
            runs.append(run)
        assert [run["prompt"] for run in runs] == ["def first(a):", "def second(b):"]
        assert errors == []
    finally:
        for context in contexts:
            context.close()


def test_only_the_visitor_who_started_a_run_sees_its_stop_button(served, browser) -> None:
    # given a run started by one visitor, still running
    owner, other = (browser.new_context() for _ in "ab")
    try:
        page = owner.new_page()
        page.goto(f"{served.base}/playground/")
        page.get_by_role("textbox", name="Prompt").fill("Mine")
        page.get_by_label("Max new tokens").fill("200")
        page.get_by_role("button", name="Run", exact=True).click()
        page.wait_for_function(f"() => document.querySelectorAll('{GENERATED}').length >= 2")
        # when another visitor opens its permalink
        theirs = other.new_page()
        theirs.goto(page.url)
        theirs.wait_for_function(f"() => document.querySelectorAll('{GENERATED}').length >= 1")
        # then only the creator has Stop, and it works for them
        assert theirs.get_by_role("button", name="Stop").count() == 0
        page.get_by_role("button", name="Stop").click()
        theirs.wait_for_function(
            "() => document.getElementById('run-status').textContent.startsWith('Stopped')",
            timeout=30_000,
        )
    finally:
        owner.close()
        other.close()


def _heatmap_columns(label: str) -> str:
    return (
        f"document.querySelector('#compare-run-{label} [data-heatmap]').data?.[0]?.x?.length ?? 0"
    )


def test_compare_with_q_presets_streams_three_heatmaps_and_marks_what_differs(served, page) -> None:
    # given a finished run at q 0.7
    run = served.submit(prompt="def add(a, b):", model="ouro-tiny", q=0.7, max_new_tokens=96)
    for event in served.events(run):
        if event.get("event") in ("done", "error"):
            break
    page.goto(f"{served.base}{run['url']}")
    # when "Compare with…" starts the q 0.5 / 0.7 / 0.9 preset
    page.get_by_text("Compare with…").click()
    page.get_by_label("q 0.5 / 0.7 / 0.9").check()
    page.get_by_role("button", name="Start comparison").click()
    # then the compare view opens on the run and its two siblings
    page.wait_for_url("**/playground/compare/?runs=*")
    assert page.locator(".compare-run").count() == 3
    ids = page.url.split("runs=")[1].split(",")
    assert ids[0] == run["id"] and len(ids) == 3
    # and the siblings' heatmaps fill in while they stream (14 prompt bytes, then tokens)
    page.wait_for_function(
        f"() => ({_heatmap_columns('B')}) >= 14 + 3 && ({_heatmap_columns('C')}) >= 14 + 3"
    )
    statuses = page.locator(".compare-run [data-status]").all_inner_texts()
    assert statuses[0] == "Done" and "Running" in statuses[1:], statuses
    assert page.evaluate(_heatmap_columns("A")) == 14 + 96
    # and once both are done, every heatmap holds every stored token on one axis
    page.wait_for_function(
        "() => [...document.querySelectorAll('.compare-run [data-status]')]"
        ".every((node) => node.textContent.startsWith('Done'))",
        timeout=90_000,
    )
    for label, run_id in zip("ABC", ids, strict=True):
        stored = served.get(f"/api/v1/runs/{run_id}/tokens/").json()
        page.wait_for_function(f"() => ({_heatmap_columns(label)}) === {len(stored)}")
    # and the table marks the rows that differ: the settings at least, once the last rows land
    page.wait_for_function("() => document.getElementById('comparison').dataset.live === 'false'")
    settings_row = page.locator('#compare-stats tr[data-stat="settings"]')
    assert "differs" in (settings_row.get_attribute("class") or "")
    assert settings_row.locator(".differs-mark").inner_text() == "differs"
    cells = settings_row.locator("td").all_inner_texts()
    assert ["q = 0.7" in cells[0], "q = 0.5" in cells[1], "q = 0.9" in cells[2]] == [True] * 3
    assert page.locator("#depth-row tbody tr").count() == 3 + 1  # each run's exits, the difference
    assert page.errors == []


def _box(page, selector: str) -> dict:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    return box


@pytest.mark.parametrize("width", [1280, 390])
def test_the_form_shows_its_result_where_the_eye_is(served, browser, width) -> None:
    page = browser.new_page(viewport={"width": width, "height": 800})
    try:
        # given the playground, with Run right under the prompt at either width
        page.goto(f"{served.base}/playground/")
        prompt, run = _box(page, "#id_prompt"), _box(page, "#run-button")
        assert 0 <= run["y"] - (prompt["y"] + prompt["height"]) < 60
        assert run["y"] + run["height"] < 800  # visible without scrolling
        # and the model notes below the output; on a phone the output follows the form
        form, output = _box(page, "#run-form"), _box(page, "#run")
        assert _box(page, "#model-notes")["y"] > output["y"] + output["height"]
        if width == 390:
            assert 0 <= output["y"] - (form["y"] + form["height"]) < 40
        # when an empty prompt is submitted with Ctrl+Enter
        page.locator("#id_prompt").focus()
        page.keyboard.press("Control+Enter")
        # then its error sits beside Run, focused and in view
        page.wait_for_function("() => document.activeElement?.id === 'form-errors'")
        errors, run = _box(page, "#form-errors"), _box(page, ".run-actions-bar")
        assert "Prompt" in page.locator("#form-errors").inner_text()
        assert 0 <= errors["y"] - (run["y"] + run["height"]) < 20
        assert run["y"] >= 0 and errors["y"] + errors["height"] < 800
        # when a prompt is run with ⌘+Enter from the prompt box
        page.locator("#id_prompt").fill("def add(a, b):")
        page.locator("#id_prompt").press("Meta+Enter")
        # then the output is focused and scrolled to the top of the view
        page.wait_for_url("**/playground/runs/*/")
        page.wait_for_function("() => document.activeElement?.id === 'run-heading'")
        heading = _box(page, "#run-heading")
        assert -2 <= heading["y"] < 100
        assert page.locator("#form-errors").count() == 0  # the earlier error is gone
        page.locator("#tokens .tok").first.wait_for()
    finally:
        page.close()


def _finished(served: Stack, **params) -> dict:
    run = served.submit(prompt="def add(a, b):", model="ouro-tiny", **params)
    for event in served.events(run):
        if event.get("event") in ("done", "error"):
            break
    return run


def _branchable(stored: list[dict]) -> tuple[int, int]:
    """A generated position whose prefix and some alternative are plain ASCII bytes (the
    random tiny model writes any byte; half a character cannot be branched on)."""
    for event in stored:
        position = event["position"]
        if event["phase"] != "generated":
            continue
        previous = stored[position - 1]
        row = next(r for r in previous["loops"] if r["loop"] == previous["exit_loop"])
        choices = [entry[0] for entry in row["top"][1:5] if entry[0] < 128]
        choices = [choice for choice in choices if choice != event["token_id"]]
        if choices:
            return position, choices[0]
        if event["token_id"] >= 128:
            break
    pytest.skip("the tiny model offered no ASCII alternative on an ASCII prefix")


def test_a_branch_from_a_run_page_opens_the_compare_view_at_the_branch_point(served, page) -> None:
    # given a finished run's page
    run = _finished(served, q=0.7, max_new_tokens=12)
    stored = served.get(run["tokens_url"]).json()
    position, choice = _branchable(stored)
    page.goto(f"{served.base}{run['url']}")
    # when a generated token is clicked, its alternatives show, and one is chosen
    page.locator(f'#tokens .tok[data-position="{position}"]').click()
    panel = page.locator("#branch-panel")
    panel.wait_for(state="visible")
    assert f"Branch at #{position}" in panel.inner_text()
    assert panel.locator(".branch-choice").count() >= 1
    panel.locator(f'.branch-choice[value="{choice}"]').click()
    # then the compare view opens on the run and its branch, the branch point marked
    page.wait_for_url("**/playground/compare/?runs=*")
    ids = page.url.split("runs=")[1].split(",")
    assert ids[0] == run["id"] and len(ids) == 2
    mark = page.locator("#branch-point")
    assert mark.get_attribute("data-position") == str(position)
    assert "branches from run A" in mark.inner_text()
    assert page.locator(f"#depth-row th.branch-point:text-is('{position}')").count() == 1
    # and once the branch has streamed, its tokens part from the run's exactly there
    page.wait_for_function(
        f"() => document.getElementById('divergence')?.dataset.position === '{position}'",
        timeout=60_000,
    )
    branch = served.get(f"/api/v1/runs/{ids[1]}/tokens/").json()
    assert [t["token_id"] for t in branch[:position]] == [t["token_id"] for t in stored[:position]]
    assert branch[position]["token_id"] == choice
    assert page.errors == []


def test_a_full_depth_run_page_rings_each_settling_loop_and_gives_its_calibration(
    served, page
) -> None:
    # given a q = 1 run (every loop of every position computed), its page opened at once
    run = served.submit(prompt="def add(a, b):", model="ouro-tiny", q=1.0, max_new_tokens=32)
    page.goto(f"{served.base}{run['url']}")
    # when it streams to the end
    page.wait_for_function(
        "() => document.getElementById('run-status').textContent.startsWith('Done')",
        timeout=60_000,
    )
    stored = served.get(run["tokens_url"]).json()
    page.wait_for_function(f"() => {HEATMAP_COLUMNS} === {len(stored)}")
    # then the heatmap rings each position's settling loop beside its exit (◆ at 4)
    settling = page.evaluate("document.getElementById('heatmap').data[4]")
    assert settling["x"] == [token["position"] for token in stored]
    assert all(1 <= loop <= 4 for loop in settling["y"])
    assert page.evaluate("document.getElementById('heatmap').data[2].y") == [4] * len(stored)
    # and the stats give the run's calibration; no full-depth sibling is offered
    text = page.locator('[data-stat="calibration"]').inner_text()
    assert text.startswith("after ") and f"of {len(stored)} positions" in text
    # and a reload (the stored run, drawn by the server) shows the same
    page.reload()
    page.wait_for_function(f"() => {HEATMAP_COLUMNS} === {len(stored)}")
    assert page.evaluate("document.getElementById('heatmap').data[4]")["y"] == settling["y"]
    assert page.locator('[data-stat="calibration"]').inner_text() == text
    assert page.locator("#full-depth-button").count() == 0
    assert page.errors == []
