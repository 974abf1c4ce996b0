"""Every page works under the Content-Security-Policy in a real Chromium: no violation,
and Plotly, htmx and the API docs' Swagger UI still run."""

import pytest

from atlas.datafile import records_from_file
from atlas.services import atlas_load
from playground.models import Run, RunToken
from tests.atlas.conftest import SMALL_ATLAS
from tests.playground.conftest import PROMPT, make_event

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Collected before any page script runs (Playwright injects it outside the page's CSP).
WATCH_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.cspViolations.push(`${event.violatedDirective} ${event.blockedURI}`);
});
"""


def _finished_run() -> Run:
    run = Run.objects.create(
        prompt=PROMPT,
        model="ouro-tiny",
        params={"max_new_tokens": 4, "q": 0.7, "loops": None, "seed": 0},
        trained_loops=4,
        status=Run.Status.DONE,
    )
    for position in range(6):
        RunToken.from_event(
            run, make_event(position, "prompt" if position < 2 else "generated")
        ).save()
    return run


def test_no_page_breaks_the_policy_and_the_scripts_still_run(browser, live_server) -> None:
    # given the atlas and a finished run
    atlas_load(records=records_from_file(SMALL_ATLAS), source=SMALL_ATLAS.name)
    run = _finished_run()
    page = browser.new_page()
    page.add_init_script(WATCH_VIOLATIONS)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.on("pageerror", lambda exc: console.append(str(exc)))
    pages = {
        # path: what shows that the page's scripts ran
        "/": "#timeline .scatterlayer .point",
        "/works/universal-transformers/": "main h1",
        "/compare/?works=universal-transformers,mixture-of-recursions": "table.compare",
        "/playground/": "#run-form",
        f"/playground/runs/{run.id}/": "#heatmap .heatmaplayer",
        "/api/docs/": ".swagger-ui .opblock",
    }
    try:
        for path, ready in pages.items():
            # when each page is opened
            response = page.goto(f"{live_server.url}{path}")
            page.wait_for_selector(ready)
            # then it was served under the policy and nothing was refused
            assert response is not None and "script-src 'self'" in response.headers.get(
                "content-security-policy", ""
            ), path
            assert page.evaluate("window.cspViolations") == [], path
        # when htmx swaps Explore's results (a filter)
        page.goto(f"{live_server.url}/")
        page.get_by_label("Universal / weight-tied stack").check()
        page.get_by_text("3 works", exact=True).wait_for()
        # then the swap ran, redrew the timeline, and broke no rule either
        page.wait_for_function(
            "() => document.querySelectorAll('#timeline .scatterlayer .point').length === 3"
        )
        assert page.evaluate("window.cspViolations") == []
        assert [line for line in console if "Content Security Policy" in line] == []
    finally:
        page.close()
