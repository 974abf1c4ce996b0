"""POST /api/v1/proposals/: checked as the data file is, duplicates refused with a 409,
throttled per address; GET: the intake log, newest first, without any contact."""

import pytest

from atlas.models import Proposal

pytestmark = pytest.mark.django_db

URL = "/api/v1/proposals/"
CONTACT = "secret-proposer@example.org"


def proposal(**fields) -> dict:
    """A valid proposal of a work that is not in the small atlas."""
    return {
        "title": "Elastic Loops: Depth on Demand for Looped Transformers",
        "arxiv_id": "2611.01234",
        "authors": ["Ada Lovelace", "Alan Turing"],
        "month": "2026-11",
        "summary": "Lets each token pick its loop count with a learned exit gate.",
        "recurrence_family": "looped-lm",
        "depth_control": "exit-gate",
        "depth_granularity": "token",
        "modality": ["language"],
        "contribution": ["architecture"],
        "evidence": {"depth_control": {"note": "Section 3's gate.", "source": "summary"}},
        "rationale": "A looped LM with per-token exits, squarely in scope.",
        "contact": CONTACT,
    } | fields


def post(client, data: dict, address: str = "198.51.100.1"):
    return client.post(URL, data, content_type="application/json", REMOTE_ADDR=address)


def test_a_valid_proposal_is_stored_pending_and_its_contact_is_not_answered(
    client, small_atlas
) -> None:
    # when
    response = post(client, proposal())
    # then
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "pending" and body["work"] is None
    assert CONTACT not in response.content.decode()
    stored = Proposal.objects.get(pk=body["id"])
    assert stored.contact == CONTACT and stored.depth_control == "exit-gate"
    assert stored.kv_strategy == "unspecified"  # left out: the source does not say


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"title": ""}, "title", "is required"),
        ({"title": "x" * 501}, "title", "longer than 500"),
        ({"title": "two\nlines"}, "title", "one line"),
        ({"arxiv_id": "arXiv:2611.1"}, "arxiv_id", "is not an arXiv identifier"),
        ({"arxiv_id": None, "url": None}, "url", "at least one"),
        ({"url": "ftp://example.org/paper.pdf"}, "url", "http(s) URL"),
        ({"url": "javascript:alert(1)"}, "url", "http(s) URL"),
        ({"code_url": "https://example.org/a b"}, "code_url", "percent-encode"),
        ({"authors": "Ada Lovelace"}, "authors", "must be a list"),
        ({"authors": ["A"] * 2}, "authors", "more than once"),
        ({"authors": [f"A{n}" for n in range(101)]}, "authors", "more than 100"),
        ({"month": "2026-13"}, "month", "YYYY-MM"),
        ({"month_estimated": "yes"}, "month_estimated", "true or false"),
        ({"summary": "s" * 5001}, "summary", "longer than 5000"),
        ({"recurrence_family": "spiral"}, "recurrence_family", "allowed: universal"),
        ({"modality": ["smell"]}, "modality", "not an allowed modality"),
        ({"topics": ["Not A Slug"]}, "topics", "topic slug"),
        ({"evidence": {"depth_control": {"note": "n", "source": "rumour"}}}, "evidence", "source"),
        ({"evidence": {"colour": {}}}, "evidence", "not a facet"),
        ({"rationale": " "}, "rationale", "must not be empty"),
        ({"rationale": "r" * 2001}, "rationale", "longer than 2000"),
        ({"contact": "c" * 201}, "contact", "longer than 200"),
        ({"depth_granularity": "none"}, "depth_granularity", "rule stopping-granularity"),
        ({"depth_control": "fixed"}, "depth_control", "rule fixed-depth-granularity"),
        (
            {"kv_strategy": "best-available", "depth_granularity": "sequence"},
            "kv_strategy",
            "rule per-token-cache",
        ),
        ({"colour": "red"}, "colour", "unknown field"),
    ],
)
def test_every_bad_field_is_a_400_naming_the_field_and_the_rule(
    client, small_atlas, fields, field, message
) -> None:
    response = post(client, proposal(**fields))
    assert response.status_code == 400, response.content
    assert message in " ".join(response.json()["errors"][field])
    assert not Proposal.objects.exists()


@pytest.mark.parametrize(
    ("fields", "named", "reason"),
    [
        ({"arxiv_id": "1807.03819v3"}, "universal-transformers", "same arXiv id"),
        ({"title": "UNIVERSAL transformers!"}, "universal-transformers", "same title"),
        (
            {
                "title": "Mixture of Recursions: Learning Dynamic Recursive Depth for Adaptive "
                "Token-Level Computation"
            },
            "mixture-of-recursions",
            "near-identical title",
        ),
    ],
)
def test_a_work_already_in_the_atlas_is_a_409_naming_it(
    client, small_atlas, fields, named, reason
) -> None:
    response = post(client, proposal(**fields))
    assert response.status_code == 409
    duplicate = response.json()["duplicate"]
    assert duplicate["kind"] == "work" and duplicate["id"].startswith(named)
    assert duplicate["reason"].startswith(reason) and named in response.json()["detail"]
    assert not Proposal.objects.exists()


def test_a_pending_proposal_is_a_409_naming_it(client, small_atlas) -> None:
    first = post(client, proposal()).json()
    again = post(client, proposal(arxiv_id=None, url="https://example.org/elastic"))
    assert again.status_code == 409
    assert again.json()["duplicate"] == again.json()["duplicate"] | {
        "kind": "proposal",
        "id": str(first["id"]),
        "reason": "same title",
    }


def test_parts_of_a_series_are_different_works(client, small_atlas) -> None:
    part_one = proposal(
        title="Towards Looped Models Done Right, Part I: Topology",
        arxiv_id=None,
        url="https://example.org/part-1",
    )
    part_two = part_one | {
        "title": "Towards Looped Models Done Right, Part II: Topology",
        "url": "https://example.org/part-2",
    }
    assert post(client, part_one).status_code == 201
    assert post(client, part_two).status_code == 201


def test_proposals_are_throttled_per_address_with_a_429(client, small_atlas) -> None:
    # given the default budget of 5 an hour spent
    codes = [
        post(client, proposal(title=f"Loop study number {n}", arxiv_id=f"2611.0000{n}")).status_code
        for n in range(5)
    ]
    # when one more comes, from the same address and from another
    refused = post(client, proposal(title="Loop study six", arxiv_id="2611.00006"))
    other = post(client, proposal(), address="198.51.100.2")
    # then
    assert codes == [201] * 5
    assert refused.status_code == 429 and "Retry-After" in refused.headers
    assert other.status_code == 201


def test_the_intake_log_lists_newest_first_filters_by_status_and_hides_contacts(
    client, small_atlas
) -> None:
    # given two proposals, one rejected
    first = post(client, proposal(title="First loop", arxiv_id="2611.00001")).json()
    second = post(client, proposal(title="Second loop", arxiv_id="2611.00002")).json()
    Proposal.objects.filter(pk=first["id"]).update(status="rejected", review_note="Off topic.")
    # when
    log = client.get(URL)
    rejected = client.get(URL, {"status": "rejected"})
    bad = client.get(URL, {"status": "lost"})
    unknown = client.get(URL, {"colour": "red"})
    # then
    assert [p["id"] for p in log.json()["results"]] == [second["id"], first["id"]]
    assert [(p["id"], p["reason"]) for p in rejected.json()["results"]] == [
        (first["id"], "Off topic.")
    ]
    assert bad.status_code == 400 and "status" in bad.json()["errors"]
    assert unknown.status_code == 400 and "colour" in unknown.json()["errors"]
    assert CONTACT not in log.content.decode()
