"""Every page of the site passes axe-core in Chromium, at a desktop and a phone width.

axe-core is vendored and pinned (``tests/vendor/``), injected into each page after it has
drawn (htmx swapped, Plotly charts rendered, Swagger UI built), and every violation it
reports fails the test, with the page, the rule and the elements named. The pages hold
real content: a small atlas, finished runs of both shipped models with stored tokens, a
comparison of two runs, a frontier link's note, a form with errors.
"""

import hashlib
from pathlib import Path

import pytest

from atlas.datafile import records_from_file
from atlas.models import Author
from atlas.services import atlas_load
from playground.models import Run, RunToken
from tests.playground.conftest import make_event

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).parents[1] / "vendor" / "axe-core" / "axe.min.js"
AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"  # 4.14.1
SMALL_ATLAS = Path(__file__).parents[1] / "atlas" / "data" / "works.yaml"
# What has to be on the page before axe looks: charts drawn, Swagger UI's operations.
READY = """() => {
  const selector = '[data-frontier], [data-calibration], #heatmap, [data-heatmap], #timeline';
  const charts = [...document.querySelectorAll(selector)].filter((c) => c.offsetParent);
  const drawn = charts.every((chart) => chart.querySelector('.main-svg'));
  const swagger = document.getElementById('swagger-ui');
  return drawn && (!swagger || swagger.querySelector('.opblock'));
}"""


def _finished_run(model: str, prompt: str, text: str, loops: int, **fields) -> Run:
    run = Run.objects.create(
        prompt=prompt,
        model=model,
        params={"max_new_tokens": len(text), "q": 0.7, "loops": loops, "seed": 0} | fields,
        trained_loops=loops,
        status=Run.Status.DONE,
    )
    for position, char in enumerate(prompt + text):
        phase = "prompt" if position < len(prompt) else "generated"
        event = make_event(position, phase, loops=loops, exit_loop=1 + position % loops)
        RunToken.from_event(run, event | {"text": char}).save()
    return run


@pytest.fixture
def site(db) -> list[str]:
    """The paths of every page, over real content."""
    records = records_from_file(SMALL_ATLAS)
    atlas_load(records=records, source=SMALL_ATLAS.name)
    slugs = [record.slug for record in records]
    author = Author.objects.order_by("pk").first()
    assert author is not None
    text = _finished_run("pydoc-loop", "def add(a, b):", "\n    return a + b\n", 4)
    other = _finished_run("pydoc-loop", "def add(a, b):", "\n    return a - b\n", 4, q=0.5)
    task = _finished_run("hop-loop", "ga dc fd be af eg ch hb;f3=", "h\n", 6)
    point = (
        "/playground/?model=hop-loop&exit_rule=q-exit&q=0.7"
        "&frontier_point=q-exit+q%3D0.7+%C2%B7+best-available"
    )
    return [
        "/",
        f"/works/{slugs[0]}/",
        f"/compare/?works={','.join(slugs[:3])}",
        "/works/propose/",
        "/intake/",
        "/map/",
        author.get_absolute_url(),
        "/playground/",
        point,
        "/playground/runs/",
        "/playground/frontier/",
        text.get_absolute_url(),
        task.get_absolute_url(),
        f"/playground/compare/?runs={text.id},{other.id}",
        "/api/docs/",
    ]


def _violations(page) -> list[str]:
    """axe-core's violations on the page as it stands: rule, then up to four elements."""
    page.add_script_tag(path=str(AXE))
    violations = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".map((v) => [v.id, v.nodes.map((n) => n.target.join(' ')).slice(0, 4).join(', ')])"
    )
    return [f"[{rule}] {nodes}" for rule, nodes in violations]


def test_the_vendored_axe_core_is_the_pinned_release():
    assert hashlib.sha256(AXE.read_bytes()).hexdigest() == AXE_SHA256


@pytest.mark.parametrize("width", [1280, 390])
def test_every_page_has_no_axe_violations(browser, live_server, site, width):
    # axe goes in as an inline script, which the site's CSP rightly refuses
    context = browser.new_context(viewport={"width": width, "height": 900}, bypass_csp=True)
    page = context.new_page()
    found: list[str] = []
    try:
        for path in site:
            page.goto(f"{live_server.url}{path}")
            page.wait_for_function(READY, timeout=30_000)
            found += [f"{path} {violation}" for violation in _violations(page)]
        # and a form that came back with errors
        page.goto(f"{live_server.url}/playground/")
        page.locator("#run-button").click()
        page.locator("#form-errors").wait_for()
        found += [f"/playground/ (errors) {violation}" for violation in _violations(page)]
    finally:
        context.close()
    assert found == [], "\n".join(found)
