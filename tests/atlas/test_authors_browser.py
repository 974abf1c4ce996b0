"""A work page in a real Chromium: its author names lead to the authors' pages, and its
BibTeX block is reached by keyboard and copied by its button."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_author_links_and_copy_bibtex(browser, live_server, small_atlas) -> None:
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        # given the Universal Transformers' page
        page.goto(f"{live_server.url}/works/universal-transformers/")
        block = page.locator("pre#bibtex")
        # when the keyboard moves focus forward from the page's start
        page.locator("body").focus()
        for _ in range(60):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.id") == "bibtex":
                break
        # then the BibTeX block is reached, and then its Copy button
        assert page.evaluate("document.activeElement.id") == "bibtex"
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Copy BibTeX"
        # when the button is pressed from the keyboard
        page.keyboard.press("Enter")
        page.get_by_role("status").get_by_text("Copied.").wait_for()
        # then the clipboard holds exactly the entry
        assert page.evaluate("navigator.clipboard.readText()") == block.text_content()
        assert block.text_content().startswith("@inproceedings{")
        # when an author's name is followed
        page.get_by_role("link", name="Łukasz Kaiser").click()
        # then their page lists their work
        page.wait_for_url("**/authors/lukasz-kaiser/")
        assert page.locator("h1").text_content() == "Łukasz Kaiser"
        assert page.locator(".work-row h3 a").all_text_contents() == ["Universal Transformers"]
        assert errors == []
    finally:
        context.close()
