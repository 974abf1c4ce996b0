"""Related works that say why: mentions of curated short names in both directions and
the nearest works by text and facets, stored per data version, on the page and in the
API, on SQLite and PostgreSQL."""

import io

import pytest
from django.core.management import call_command

from atlas.models import RelatedWork, Work
from atlas.related import WorkText, _work_texts, mentions_find, related_compute
from atlas.selectors import data_version, work_related

pytestmark = pytest.mark.django_db

OURO = "scaling-latent-reasoning-via-looped-language-models"
HUGINN = "scaling-up-test-time-compute-with-latent-reasoning-a"
QUERY_HANDOFF = "cross-loop-query-handoff-how-later-loops-redirect-two-hop"


@pytest.fixture
def curated(django_capture_on_commit_callbacks) -> dict[str, Work]:
    """The curated atlas, loaded as the command does, its commit hooks run."""
    with django_capture_on_commit_callbacks(execute=True):
        call_command("load_atlas", stdout=io.StringIO())
    return {work.slug: work for work in Work.objects.all()}


def _slugs(pairs) -> list[str]:
    return [work.slug for work, _ in pairs]


def test_a_known_mention_is_listed_in_both_directions(curated) -> None:
    # given "A mechanistic study of how later loops in Ouro repair two-hop retrieval"
    handoff = work_related(work=curated[QUERY_HANDOFF])
    ouro = work_related(work=curated[OURO])
    # then the study builds on Ouro, and Ouro is mentioned by the study, naming the name
    assert (curated[OURO], {"name": "Ouro"}) in handoff.mentions
    assert (curated[QUERY_HANDOFF], {"name": "Ouro"}) in ouro.mentioned_by
    assert len(ouro.mentioned_by) >= 10 and OURO not in _slugs(ouro.mentioned_by)
    # and "Probes Huginn-3.5B…" mentions Huginn
    lens = [w for w in curated.values() if w.summary.startswith("Probes Huginn-3.5B")]
    assert [(w.slug, x) for w, x in work_related(work=lens[0]).mentions] == [
        (HUGINN, {"name": "Huginn"})
    ]
    assert lens[0].slug in _slugs(work_related(work=curated[HUGINN]).mentioned_by)


def test_a_name_inside_a_hyphenated_name_or_a_word_is_not_a_mention() -> None:
    works = [
        WorkText(1, "ut", "UT", "Universal.", ["UT"], []),
        WorkText(2, "lstm", "L", "LSTM-UT and UTF-8 and OUTPUT.", [], []),
        WorkText(3, "uses", "U", "A UT-style model; two UTs.", [], []),
    ]
    found = {(r.work, r.kind, r.other) for r in mentions_find(works)}
    assert found == {(3, "mentions", 1), (1, "mentioned_by", 3)}


def test_similar_works_are_five_others_deterministic_and_say_why(curated) -> None:
    # when computed twice from the same works
    texts = _work_texts()
    first, second = related_compute(texts), related_compute(texts)
    # then they agree exactly, and no work is similar to itself
    assert first == second
    similar = [r for r in first if r.kind == "similar"]
    assert all(r.work != r.other for r in similar)
    per_work = {work: [r for r in similar if r.work == work] for work in {r.work for r in similar}}
    assert len(per_work) == len(curated) and all(len(rs) == 5 for rs in per_work.values())
    # and each says why: shared facet values and the strongest shared terms, best first
    ut = work_related(work=curated["universal-transformers"]).similar
    scores = [reason["score"] for _, reason in ut]
    assert scores == sorted(scores, reverse=True)
    assert "Depth control: Halting" in ut[0][1]["facets"] and "universal" in ut[0][1]["terms"]


def test_relations_are_stored_for_the_current_version_and_follow_a_change(
    curated, django_capture_on_commit_callbacks
) -> None:
    assert set(RelatedWork.objects.values_list("version", flat=True)) == {data_version().change_id}
    # when a summary changes so that it names Huginn
    from atlas.models import AtlasChange
    from atlas.services import atlas_change_record, work_state

    work = curated[QUERY_HANDOFF]
    before = work_state(work)
    work.summary += " Unlike Huginn, it reads queries."
    work.save()
    with django_capture_on_commit_callbacks(execute=True):
        atlas_change_record(
            kind=AtlasChange.Kind.EDIT, summary="test", changes=[(work, before, work_state(work))]
        )
    # then the new version's relations include it
    assert set(RelatedWork.objects.values_list("version", flat=True)) == {data_version().change_id}
    assert _slugs(work_related(work=work).mentions) == [OURO, HUGINN]


def test_the_work_page_lists_each_relation_with_why(client, curated) -> None:
    page = client.get(f"/works/{OURO}/").content.decode()
    assert "<h3>Mentioned by</h3>" in page and "names this work as “Ouro”" in page
    assert f'href="/works/{QUERY_HANDOFF}/"' in page
    assert "<h3>Similar</h3>" in page and "shares Contribution:" in page
    handoff = client.get(f"/works/{QUERY_HANDOFF}/").content.decode()
    assert "<h3>Builds on or discusses</h3>" in handoff and "its summary names “Ouro”" in handoff


def test_the_related_endpoint_gives_both_lists(client, curated) -> None:
    response = client.get(f"/api/v1/works/{OURO}/related/")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"mentions", "mentioned_by", "similar"}
    by = {item["slug"]: item for item in body["mentioned_by"]}
    assert by[QUERY_HANDOFF]["name"] == "Ouro"
    assert by[QUERY_HANDOFF]["page_url"] == f"http://testserver/works/{QUERY_HANDOFF}/"
    assert len(body["similar"]) == 5 and all("score" in item for item in body["similar"])
    missing = client.get("/api/v1/works/no-such-work/related/")
    assert missing.status_code == 404 and missing.json()["detail"]
    assert client.get(f"/api/v1/works/{OURO}/related/?zzz=1").status_code == 400
