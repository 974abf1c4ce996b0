"""A proposal reviewed in the admin: accepted, it is a work like any other from a new data
version on (pages, API, exports, changes); rejected, the log says why. The contact shows
in no public output."""

import json

import pytest
from django.test import Client

from atlas.models import AtlasChange, Proposal, Work
from atlas.proposals import proposal_accept
from atlas.services import ReviewError
from tests.atlas.api.test_proposals import CONTACT, post, proposal

pytestmark = pytest.mark.django_db

TITLE = "Elastic Loops: Depth on Demand for Looped Transformers"


def admin_form(curator_client: Client, pk: int, **changes) -> dict:
    """The change form's current values (JSON fields as the admin shows them), changed."""
    page = curator_client.get(f"/admin/atlas/proposal/{pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    data = {name: "" if value is None else value for name, value in data.items()}
    data = {name: value for name, value in data.items() if value is not False}
    return data | changes


def review(curator_client: Client, pk: int, button: str, **changes):
    data = admin_form(curator_client, pk, **changes) | {button: "1"}
    return curator_client.post(f"/admin/atlas/proposal/{pk}/change/", data, follow=True)


def submitted(client: Client, **fields) -> int:
    response = post(client, proposal(**fields))
    assert response.status_code == 201, response.content
    return response.json()["id"]


def public_outputs(client: Client, before: int) -> dict[str, str]:
    """Every public answer that may show the new work (the contact must be in none)."""
    outputs = {
        f"export {fmt}": client.get("/api/v1/export/", {"format": fmt}).content.decode()
        for fmt in ("json", "csv", "bibtex", "ris")
    }
    return outputs | {
        "explore": client.get("/", {"search": "elastic"}).content.decode(),
        "works api": client.get("/api/v1/works/", {"search": "elastic"}).content.decode(),
        "changes": client.get("/api/v1/changes/", {"since": before}).content.decode(),
        "intake": client.get("/intake/").content.decode(),
        "proposals api": client.get("/api/v1/proposals/").content.decode(),
    }


def test_an_accepted_proposal_is_a_work_from_a_new_data_version_on(
    client, curator_client, small_atlas
) -> None:
    # given a proposal and the data version before it is reviewed
    pk = submitted(client)
    before = AtlasChange.objects.latest().pk
    # when a curator accepts it
    response = review(curator_client, pk, "_accept", review_note="In scope: per-token exits.")
    # then it is a work, with a slug, a citation key and the proposal's evidence
    assert "accepted: its work is in the atlas" in response.content.decode()
    work = Work.objects.get(title=TITLE)
    assert work.slug == "elastic-loops-depth-on-demand-for-looped-transformers"
    assert work.position == 9 and work.citation_key == "lovelace2026elastic"
    assert work.evidence == {"depth_control": {"note": "Section 3's gate.", "source": "summary"}}
    assert work.facts_source == f"proposal #{pk} in the intake log"
    stored = Proposal.objects.get(pk=pk)
    assert (stored.status, stored.work, str(stored.reviewed_by)) == ("accepted", work, "curator")
    # and a new data version lists it as added
    change = AtlasChange.objects.latest()
    assert change.pk > before and change.kind == "proposal"
    changes = client.get("/api/v1/changes/", {"since": before}).json()["changes"]
    assert [(c["work"], c["field"], c["kind"]) for c in changes] == [
        (work.slug, "work", "proposal")
    ]
    # and every public output shows it, none its contact
    outputs = public_outputs(client, before)
    for name, text in outputs.items():
        assert CONTACT not in text, name
        if name not in ("changes",):
            assert "Elastic Loops" in text or "elastic-loops" in text, name
    assert client.get(work.get_absolute_url()).status_code == 200
    assert f'href="{work.get_absolute_url()}"' in outputs["intake"]
    # and the version before it, pinned, does not have it; the new one does
    old = client.get(f"/api/v1/export/versions/{before}/", {"format": "json"}).json()
    new = client.get(f"/api/v1/export/versions/{change.pk}/", {"format": "json"}).json()
    assert TITLE not in json.dumps(old) and TITLE in json.dumps(new)


def test_a_curator_edits_any_field_before_accepting(client, curator_client, small_atlas) -> None:
    pk = submitted(client)
    review(curator_client, pk, "_accept", title="Elastic Loops", kv_strategy="per-loop")
    work = Work.objects.get(proposal__pk=pk)
    assert (work.title, work.slug, work.kv_strategy) == (
        "Elastic Loops",
        "elastic-loops",
        "per-loop",
    )


def test_an_edit_that_breaks_a_rule_is_not_accepted(client, curator_client, small_atlas) -> None:
    pk = submitted(client)
    response = review(curator_client, pk, "_accept", depth_granularity="none")
    assert "breaks rule(s) fixed-depth-granularity, stopping-granularity" in (
        response.content.decode()
    )
    assert (
        Proposal.objects.get(pk=pk).status == "pending"
        and not Work.objects.filter(title=TITLE).exists()
    )


def test_rejecting_needs_a_public_reason_which_the_log_shows(
    client, curator_client, small_atlas
) -> None:
    pk = submitted(client)
    without = review(curator_client, pk, "_reject")
    assert "give the public reason" in without.content.decode()
    review(curator_client, pk, "_reject", review_note="Not about recurrent depth.")
    stored = Proposal.objects.get(pk=pk)
    assert stored.status == "rejected" and stored.work is None
    assert "Not about recurrent depth." in client.get("/intake/").content.decode()
    assert AtlasChange.objects.filter(kind="proposal").count() == 0


def test_the_curator_sees_possible_duplicates_beside_the_proposal(
    client, curator_client, small_atlas
) -> None:
    # given proposals whose titles resemble a work's (not enough to be refused)
    near = submitted(client, title="Mixture-of-Recursions for Adaptive Token-Level Computation")
    short = submitted(
        client,
        title="Universal Transformers: Revisiting Weight Sharing Across Depth",
        arxiv_id="2611.30303",
    )
    # when
    pages = [
        curator_client.get(f"/admin/atlas/proposal/{pk}/change/").content.decode()
        for pk in (near, short)
    ]
    # then
    assert "Mixture-of-Recursions: Learning Dynamic Recursive Depths" in pages[0]
    assert "Universal Transformers</a> (same title before the colon)" in pages[1]
    assert CONTACT in pages[0]  # curators do see the contact


def test_a_proposal_accepted_once_is_not_accepted_again(client, curator_client, small_atlas):
    pk = submitted(client)
    review(curator_client, pk, "_accept")
    with pytest.raises(ReviewError, match="already Accepted"):
        proposal_accept(proposal=Proposal.objects.get(pk=pk), reviewer=None)
    assert Work.objects.filter(title=TITLE).count() == 1
