"""Chromium end to end: a visitor proposes a work through the form, a curator accepts it
in the admin, and the work is found by Explore's search and in the feed."""

import pytest
from django.contrib.auth import get_user_model

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TITLE = "Elastic Loops: Depth on Demand for Looped Transformers"


def test_propose_accept_and_find_the_work(browser, live_server, small_atlas) -> None:
    get_user_model().objects.create_superuser("curator", "curator@example.org", "pw")
    visitor, curator = browser.new_context(), browser.new_context()
    page = visitor.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        # given a visitor on Explore, who follows the link to the form
        page.goto(f"{live_server.url}/")
        page.get_by_role("link", name="Propose it").click()
        # when they propose a work
        page.get_by_label("Title").fill(TITLE)
        page.get_by_label("arXiv id").fill("2611.01234")
        page.get_by_label("Authors").fill("Ada Lovelace\nAlan Turing")
        page.get_by_label("Month of first publication").fill("2026-11")
        page.get_by_label("Summary").fill("Lets each token pick its loop count with an exit gate.")
        page.get_by_label("Recurrence family:", exact=True).select_option("looped-lm")
        page.get_by_label("Depth control:", exact=True).select_option("exit-gate")
        page.get_by_label("Depth granularity:", exact=True).select_option("token")
        page.get_by_role("checkbox", name="Language", exact=True).check()
        page.get_by_label("Why it belongs in the atlas").fill("Per-token exits in a looped LM.")
        page.get_by_label("Contact (optional)").fill("me@example.org")
        page.get_by_role("button", name="Send for review").click()
        # then the intake log shows it pending
        page.get_by_text("waits for a curator's review").wait_for()
        assert page.locator(".proposal.pending").get_by_text(TITLE).is_visible()

        # when a curator signs in and accepts it with a public reason
        admin = curator.new_page()
        admin.goto(f"{live_server.url}/admin/login/?next=/admin/atlas/proposal/")
        admin.get_by_label("Username").fill("curator")
        admin.get_by_label("Password").fill("pw")
        admin.get_by_role("button", name="Log in").click()
        admin.get_by_role("link", name=TITLE).click()
        admin.get_by_label("Public reason").fill("In scope: per-token exits.")
        admin.get_by_role("button", name="Accept and add the work").click()
        admin.get_by_text("accepted: its work is in the atlas").wait_for()

        # then the visitor finds the work with Explore's search, and in the feed
        page.goto(f"{live_server.url}/")
        page.get_by_label("Search titles, summaries and authors").fill("elastic")
        page.get_by_text("1 work", exact=True).wait_for()
        page.get_by_role("link", name=TITLE).click()
        page.get_by_role("heading", name=TITLE).wait_for()
        feed = page.request.get(f"{live_server.url}/feeds/works.atom?search=elastic")
        assert feed.ok and TITLE in feed.text() and "me@example.org" not in feed.text()
        assert errors == []
    finally:
        visitor.close()
        curator.close()
