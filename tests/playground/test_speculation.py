"""Self-speculation in the playground: the option validated, the run page's numbers, the
compare preset."""

from unittest import mock

import pytest

from playground import pages, selectors, services
from playground.models import Run
from playground.siblings import PRESETS, preset_variants
from tests.playground.conftest import PROMPT

RUNS = "/api/v1/runs/"


@pytest.fixture
def post(client):
    def send(body: dict):
        return client.post(RUNS, body, content_type="application/json")

    return send


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"speculate_loops": 4}, "below the run's 4 loops"),  # ouro-tiny has T = 4
        ({"speculate_loops": 2, "loops": 2}, "below the run's 2 loops"),
        ({"speculate_loops": 32}, "less than or equal to 31"),
        ({"speculate_loops": 1, "speculate_tokens": 17}, "less than or equal to 16"),
        ({"speculate_loops": 1, "speculate_tokens": 0}, "greater than or equal to 1"),
        ({"speculate_loops": "deep"}, "valid integer"),
    ],
)
@pytest.mark.django_db
def test_a_bad_speculation_is_a_400_naming_the_field_and_its_bound(post, body, says):
    response = post({"prompt": PROMPT} | body)
    assert response.status_code == 400
    errors = response.json()["errors"]
    field = "speculate_tokens" if "speculate_tokens" in body else "speculate_loops"
    assert field in errors and says in " ".join(errors[field]), errors
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_speculative_run_is_accepted_and_keeps_its_setting(
    post, django_capture_on_commit_callbacks
):
    with (
        mock.patch.object(services, "run_enqueue"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = post({"prompt": PROMPT, "speculate_loops": 2, "speculate_tokens": 6})
    assert response.status_code == 201, response.json()
    params = Run.objects.get().params
    assert (params["speculate_loops"], params["speculate_tokens"]) == (2, 6)


@pytest.mark.django_db
def test_the_run_page_shows_acceptance_tokens_per_verify_and_the_speed_up(run_factory):
    # given a finished plain run and a speculative run of the same prompt and settings
    settings = {"max_new_tokens": 8, "q": 0.7, "loops": None, "seed": 0}
    plain = run_factory(
        status="done", params=settings | {"speculate_loops": 0}, stats={"tokens_per_s": 20.0}
    )
    spec_stats = {
        "tokens_per_s": 30.0,
        "speculate": {
            "draft_loops": 1,
            "draft_tokens": 4,
            "drafted": 10,
            "accepted": 7,
            "verify_steps": 3,
            "acceptance_rate": 0.7,
            "tokens_per_verify": 2.67,
        },
    }
    spec = run_factory(
        status="done",
        params=settings | {"speculate_loops": 1, "speculate_tokens": 4},
        stats=spec_stats,
    )
    # when
    assert selectors.run_plain_twin(run=spec) == plain
    stats = pages.stats_display(pages.run_view(run=spec, tokens=[]))
    # then
    assert stats["acceptance"] == "70% of 10 drafted tokens"
    assert stats["tokens_per_verify"] == "2.67"
    assert stats["speedup"].startswith("1.50×")
    assert (
        "speculative: draft 1 loops × 4 tokens"
        in pages.run_view(run=spec, tokens=[]).params_summary
    )
    # a plain run shows none of it
    assert "acceptance" not in pages.stats_display(pages.run_view(run=plain, tokens=[]))


@pytest.mark.django_db
def test_without_a_plain_run_of_the_prompt_the_speed_up_says_so(run_factory):
    spec = run_factory(
        status="done",
        params={"q": 0.7, "speculate_loops": 1},
        stats={"tokens_per_s": 30.0, "speculate": {"acceptance_rate": None, "drafted": 0}},
    )
    assert pages.stats_display(pages.run_view(run=spec, tokens=[]))["speedup"].startswith("—")


@pytest.mark.django_db
def test_the_compare_presets_gain_plain_against_speculative(run_factory):
    assert "plain vs speculative" in PRESETS["speculation"][0]
    plain = run_factory(params={"q": 0.7})
    assert preset_variants(plain, "speculation") == [{"speculate_loops": 1}, {"speculate_loops": 2}]
    spec = run_factory(params={"q": 0.7, "speculate_loops": 2})
    assert preset_variants(spec, "speculation") == [{"speculate_loops": 0}, {"speculate_loops": 1}]
