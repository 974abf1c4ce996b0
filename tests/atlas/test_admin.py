"""The curators' review queue and edits in the admin."""

import pytest

from atlas.models import AtlasChange, Suggestion, Work
from atlas.services import suggestion_submit

pytestmark = pytest.mark.django_db


def _suggestion(**fields) -> Suggestion:
    work = Work.objects.get(slug="universal-transformers")
    data = {"field": "venue", "proposed_value": "ICLR", "rationale": "OpenReview."} | fields
    return suggestion_submit(work=work, **data)


def test_the_queue_shows_current_and_proposed_values(curator_client, small_atlas) -> None:
    _suggestion(field="modality", proposed_value="language; vision")
    page = curator_client.get("/admin/atlas/suggestion/").content.decode()
    assert "language; algorithmic" in page and "language; vision" in page


def test_rejecting_records_the_curator_and_changes_nothing(curator_client, small_atlas) -> None:
    suggestion = _suggestion()
    curator_client.post(
        "/admin/atlas/suggestion/", {"action": "reject", "_selected_action": [suggestion.pk]}
    )
    suggestion.refresh_from_db()
    assert suggestion.status == "rejected" and str(suggestion.reviewed_by) == "curator"
    assert Work.objects.get(slug="universal-transformers").venue == "ICLR 2019"


def test_a_suggestion_already_reviewed_is_not_applied_twice(curator_client, small_atlas) -> None:
    suggestion = _suggestion()
    action = {"action": "approve", "_selected_action": [suggestion.pk]}
    curator_client.post("/admin/atlas/suggestion/", action)
    response = curator_client.post("/admin/atlas/suggestion/", action, follow=True)
    assert "was already Approved" in response.content.decode()
    assert AtlasChange.objects.filter(kind="suggestion").count() == 1


def test_an_edit_in_the_admin_is_a_new_data_version(curator_client, small_atlas) -> None:
    work = Work.objects.get(slug="universal-transformers")
    page = curator_client.get(f"/admin/atlas/work/{work.pk}/change/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {name: form.initial.get(name, "") for name in form.fields}
    data |= {
        "title": "Universal Transformers (edited)",
        "authors": '["Mostafa Dehghani"]',
        "tags-TOTAL_FORMS": "0",
        "tags-INITIAL_FORMS": "0",
        "history-TOTAL_FORMS": "0",
        "history-INITIAL_FORMS": "0",
    }
    response = curator_client.post(f"/admin/atlas/work/{work.pk}/change/", data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert AtlasChange.objects.latest().kind == "edit"
    # and the work's history holds the edited fields, old and new
    edited = work.history.filter(change=AtlasChange.objects.latest())
    changed = {row.field: (row.old, row.new) for row in edited}
    assert changed["title"] == ("Universal Transformers", "Universal Transformers (edited)")
    assert changed["authors"][1] == ["Mostafa Dehghani"]
    page = curator_client.get(f"/admin/atlas/work/{work.pk}/change/").content.decode()
    assert "Universal Transformers (edited)" in page and "History" in page
