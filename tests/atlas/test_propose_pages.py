"""The "Propose a work" page and the intake log page: the same checks, duplicates and
budget as the API, and no contact on any page."""

import pytest

from atlas.models import Proposal
from tests.atlas.api.test_proposals import CONTACT, post, proposal

pytestmark = pytest.mark.django_db


def form(**fields) -> dict:
    """A valid form submission (the API's proposal, as the page's fields)."""
    data = {
        "title": "Elastic Loops: Depth on Demand for Looped Transformers",
        "arxiv_id": "2611.01234",
        "authors": "Ada Lovelace\nAlan Turing\n",
        "month": "2026-11",
        "summary": "Lets each token pick its loop count with a learned exit gate.",
        "recurrence_family": "looped-lm",
        "depth_control": "exit-gate",
        "depth_granularity": "token",
        "kv_strategy": "unspecified",
        "training_regime": "unspecified",
        "modality": ["language"],
        "topics": "halting; kv-cache",
        "evidence_depth_control_note": "Section 3's gate.",
        "rationale": "A looped LM with per-token exits.",
        "contact": CONTACT,
    }
    return data | fields


def test_explore_and_every_page_link_to_the_form(client, small_atlas) -> None:
    explore = client.get("/").content.decode()
    work = client.get("/works/universal-transformers/").content.decode()
    assert 'href="/works/propose/"' in explore and 'href="/works/propose/"' in work
    assert 'href="/intake/"' in work


def test_a_proposal_through_the_page_is_stored_as_the_api_would(client, small_atlas) -> None:
    # when
    response = client.post("/works/propose/", form(), REMOTE_ADDR="198.51.100.1")
    # then
    stored = Proposal.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/intake/#proposal-{stored.pk}"
    assert stored.authors == ["Ada Lovelace", "Alan Turing"]
    assert stored.topics == ["halting", "kv-cache"] and stored.modality == ["language"]
    assert stored.evidence == {"depth_control": {"note": "Section 3's gate.", "source": "summary"}}
    log = client.get(response["Location"]).content.decode()
    assert f"proposal #{stored.pk} waits" in log and CONTACT not in log


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"arxiv_id": "not-an-id"}, "is not an arXiv identifier"),
        ({"url": "ftp://x.org/p", "arxiv_id": ""}, "http(s) URL"),
        ({"depth_granularity": "none"}, "breaks rule stopping-granularity"),
        ({"evidence_kv_strategy_source": "rumour"}, "evidence: kv_strategy"),
    ],
)
def test_a_bad_field_is_a_400_showing_what_it_breaks(client, small_atlas, fields, message):
    response = client.post("/works/propose/", form(**fields))
    assert response.status_code == 400 and message in response.content.decode()
    assert not Proposal.objects.exists()


def test_a_duplicate_is_a_409_linking_the_work(client, small_atlas) -> None:
    response = client.post(
        "/works/propose/",
        form(title="Universal Transformers", arxiv_id="", url="https://example.org/ut"),
        REMOTE_ADDR="198.51.100.1",
    )
    page = response.content.decode()
    assert response.status_code == 409 and 'href="/works/universal-transformers/"' in page
    assert "same title" in page


def test_the_page_and_the_api_share_one_budget_per_address(client, small_atlas) -> None:
    for n in range(5):
        post(client, proposal(title=f"Loop study {n}", arxiv_id=f"2611.0000{n}"))
    response = client.post("/works/propose/", form(), REMOTE_ADDR="198.51.100.1")
    assert response.status_code == 429 and "Too many proposals" in response.content.decode()


def test_the_intake_log_shows_status_and_reason_and_filters(client, small_atlas) -> None:
    # given one pending and one rejected proposal
    post(client, proposal(title="Kept loop", arxiv_id="2611.00001"))
    turned = post(client, proposal(title="Turned loop", arxiv_id="2611.00002")).json()
    Proposal.objects.filter(pk=turned["id"]).update(status="rejected", review_note="Not looped.")
    # when
    everything = client.get("/intake/").content.decode()
    rejected = client.get("/intake/", {"status": "rejected"}).content.decode()
    bad = client.get("/intake/", {"status": "lost"})
    # then
    assert "Kept loop" in everything and "Turned loop" in everything
    assert "Not looped." in rejected and "Kept loop" not in rejected
    assert bad.status_code == 400
    assert CONTACT not in everything
