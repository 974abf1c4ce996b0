"""Explore, the timeline and Compare in a real Chromium, with htmx and Plotly running."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POINTS = "#timeline .scatterlayer .point"


def test_filter_see_the_timeline_pick_three_and_compare_them(browser, live_server, small_atlas):
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        # given Explore with every work on the timeline
        page.goto(f"{live_server.url}/")
        page.wait_for_selector(POINTS)
        assert page.locator(POINTS).count() == len(small_atlas)
        # when three works are ticked for Compare, and then a fourth
        boxes = page.locator(".work-row").get_by_label("Compare")
        for n in range(3):
            boxes.nth(n).check()
            page.get_by_text(f"Compare ({n + 1} of 3)").wait_for()
        boxes.nth(3).check()
        # then the fourth is refused
        page.get_by_role("alert").get_by_text("You can compare up to three works").wait_for()
        assert not page.locator(".work-row").nth(3).get_by_label("Compare").is_checked()
        # when filtering by a family
        page.get_by_label("Universal / weight-tied stack").check()
        page.get_by_text("3 works", exact=True).wait_for()
        # then the list and the timeline follow the filter, and the URL keeps it
        page.wait_for_function(f"() => document.querySelectorAll('{POINTS}').length === 3")
        assert "recurrence_family=universal" in page.url
        # when Compare is opened from the tray
        page.get_by_role("link", name="open Compare").click()
        # then it shows the three picked works side by side
        page.wait_for_selector("table.compare")
        assert page.locator("table.compare thead th[scope=col]").count() == 3
        assert page.locator("tr.differs").count() >= 1
        assert errors == []
    finally:
        page.close()
