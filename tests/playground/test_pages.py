"""The playground's pages: the prompt form, a run's permalink, recent runs, Stop, escaping."""

import json
import re
import shutil
import uuid

import pytest
from django.test import Client

from playground.models import Run, RunToken
from tests.playground.conftest import TINY, make_event

pytestmark = pytest.mark.django_db


def _json_script(response, element_id: str):
    match = re.search(
        rf'<script id="{element_id}" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert match, f"no json_script #{element_id}"
    return json.loads(match[1])


def _form(**overrides) -> dict:
    data = {
        "prompt": "def add(a, b):",
        "model": "ouro-tiny",
        "exit_rule": "q-exit",
        "q": "0.7",
        "loops": "4",
        "kv_policy": "best-available",
        "max_new_tokens": "16",
        "decoding": "greedy",
        "temperature": "0.8",
        "top_p": "0.95",
        "seed": "0",
    }
    return data | overrides


def test_the_page_shows_every_control_labelled_and_an_empty_heatmap(client, settings) -> None:
    # given the tiny checkpoint configured
    settings.PLAYGROUND_MODELS = {"ouro-tiny": TINY}
    # when the page is opened
    response = client.get("/playground/")
    page = response.content.decode()
    # then every control has a label, and the model says its trained loops
    assert response.status_code == 200
    for name in (
        "prompt",
        "model",
        "exit_rule",
        "q",
        "loops",
        "extrapolate",
        "kv_policy",
        "max_new_tokens",
        "temperature",
        "top_p",
        "seed",
    ):
        assert f'<label for="id_{name}"' in page, name
        assert f'name="{name}"' in page, name
    assert 'name="decoding" value="greedy"' in page and 'name="decoding" value="sample"' in page
    assert re.search(r'<option value="ouro-tiny" [^>]*data-loops="4" data-max-loops="8"', page)
    assert "ouro-tiny (T = 4)" in page
    assert re.search(r'name="max_new_tokens"[^>]*max="256"', page)
    assert re.search(r'<button type="submit" id="run-button"[^>]*>Run</button>', page)
    assert 'method="post" action="/playground/"' in page  # works without JavaScript
    figure = _json_script(response, "heatmap-figure")
    assert figure["data"][0]["y"] == [1, 2, 3, 4]
    assert figure["data"][0]["x"] == []
    assert "No runs yet." in page


def test_a_missing_checkpoint_is_named_and_the_form_cannot_run(client, settings, tmp_path):
    # given a model whose directory is gone
    settings.PLAYGROUND_MODELS = {"gone": tmp_path / "nowhere"}
    # when the page is opened
    response = client.get("/playground/")
    page = response.content.decode()
    # then it says so, without failing, and Run is disabled
    assert response.status_code == 200
    assert "The playground has no model it can run" in page
    assert f"the checkpoint directory {tmp_path / 'nowhere'} is missing" in page
    assert re.search(r"<button type=\"submit\" id=\"run-button\"[^>]* disabled>Run</button>", page)


def test_with_no_model_configured_the_page_still_renders(client, settings) -> None:
    settings.PLAYGROUND_MODELS = {}
    response = client.get("/playground/")
    assert response.status_code == 200
    assert "The playground has no model configured." in response.content.decode()


def test_a_permalink_replays_the_stored_tokens(client, run_factory) -> None:
    # given a finished run with 3 prompt and 2 generated tokens stored
    stats = {
        "prompt_tokens": 3,
        "generated_tokens": 2,
        "average_exit_loop": 2.0,
        "token_loops_executed": 10,
        "token_loops_full": 20,
        "flops_executed": 50.0,
        "flops_full": 100.0,
        "tokens_per_s": 12.5,
        "time_to_first_token_s": 0.042,
        "peak_kv_bytes": 3 * 1024,
        "loops": 4,
    }
    run = run_factory(tokens=5, prompt_tokens=3, status=Run.Status.DONE, stats=stats)
    # when its permalink is opened
    response = client.get(run.get_absolute_url())
    page = response.content.decode()
    # then the text, the heatmap's columns and the stats come from the stored record
    assert response.status_code == 200
    assert len(re.findall(r'<span class="tok prompt[^"]*" data-position', page)) == 3
    assert len(re.findall(r'<span class="tok[^"]*" data-position="\d+"', page)) == 5
    figure = _json_script(response, "heatmap-figure")
    assert figure["data"][0]["x"] == [0, 1, 2, 3, 4]
    assert figure["data"][0]["z"][0] == [2] * 5  # computed at loop 1, shaded by exit loop 2
    assert figure["data"][1]["z"][3] == [1] * 5  # loop 4 was never computed: grey
    assert figure["data"][2]["y"] == [2] * 5  # the exit loop markers
    assert [s["x0"] for s in figure["layout"]["shapes"]] == [2.5]  # prompt | generated
    tokens = _json_script(response, "run-tokens")
    assert [token["position"] for token in tokens] == [0, 1, 2, 3, 4]
    state = _json_script(response, "run-state")
    assert state["status"] == "done"
    assert state["loops"] == 4
    assert state["events_url"] == f"/runs/{run.id}/events"
    assert "10 of 20 token-loops (50.0%)" in page
    assert "42 ms" in page and "3.0 KiB" in page and "12.5" in page
    assert f'href="/api/v1/runs/{run.id}/tokens/"' in page
    assert f'href="/api/v1/runs/{run.id}/tokens/?format=csv"' in page
    assert 'id="stop-button"' not in page  # a finished run cannot be stopped
    assert 'http-equiv="refresh"' not in page


def test_a_task_models_permalink_says_why_an_answer_is_deep(
    client, run_factory, settings, tmp_path
) -> None:
    # given a pointer-chasing model's run: the query's "=" writes the answer at loop 3 of 4
    shutil.copytree(TINY, tmp_path / "hops")
    (tmp_path / "hops" / "playground.json").write_text(json.dumps({"task": "hops"}))
    settings.PLAYGROUND_MODELS = {"hops": tmp_path / "hops"}
    run = run_factory(model="hops", status=Run.Status.DONE)
    for position, char in enumerate("ab ba;a3=b"):
        event = make_event(position, exit_loop=3 if char == "=" else 1)
        RunToken.from_event(run, event | {"text": char}).save()
    # when its permalink is opened
    response = client.get(run.get_absolute_url())
    # then the position that wrote the answer, and its exit marker, name the answer's hops
    page = response.content.decode()
    assert 'title="#8 · exit loop 3 · next token: 3 hops"' in page
    assert len(re.findall(r'title="[^"]* hops"', page)) == 1
    # and the answer it wrote is marked right, with the expected answer in its title
    assert 'data-mark="✓"' in page and "answer ✓: expected &#x27;b&#x27;" in page
    hovers = _json_script(response, "heatmap-figure")["data"][2]["hovertext"]
    assert hovers[8].endswith("exits at loop 3 (next token: 3 hops)")


def test_a_running_run_has_stop_for_its_creator_and_refreshes_without_javascript(
    client, run_factory, owner_session
) -> None:
    run = run_factory(tokens=2, prompt_tokens=2, status=Run.Status.RUNNING, **owner_session)
    page = client.get(run.get_absolute_url()).content.decode()
    assert 'id="stop-button"' in page
    assert '<noscript><meta http-equiv="refresh" content="3"></noscript>' in page
    assert 'id="stop-button"' not in Client().get(run.get_absolute_url()).content.decode()


def test_an_unknown_run_is_404(client) -> None:
    assert client.get(f"/playground/runs/{uuid.uuid4()}/").status_code == 404
    assert client.get("/playground/runs/not-a-uuid/").status_code == 404


def test_nothing_typed_or_generated_is_rendered_as_html(client, run_factory) -> None:
    # given a prompt and a token that carry markup
    prompt = '<script>alert("x")</script>'
    run = run_factory(prompt=prompt, status=Run.Status.DONE)
    event = make_event(0, "prompt") | {"text": "<img src=x onerror=alert(1)>"}
    RunToken.objects.create(
        run=run,
        position=0,
        phase="prompt",
        token_id=1,
        text=event["text"],
        exit_loop=2,
        loops_computed=2,
        data=event,
    )
    # when the permalink and the recent runs are shown
    for url in (run.get_absolute_url(), "/playground/", "/playground/runs/"):
        page = client.get(url).content.decode()
        # then the markup is text, everywhere (attributes, text, json_script, hover text)
        assert "<script>alert" not in page, url
        assert "<img src=x" not in page, url
    page = client.get(run.get_absolute_url()).content.decode()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    figure = _json_script(client.get(run.get_absolute_url()), "heatmap-figure")
    assert "&lt;img src=x onerror=alert(1)&gt;" in figure["data"][0]["hovertext"][0][0]


def test_a_plain_post_creates_the_run_and_redirects_to_its_permalink(client) -> None:
    response = client.post("/playground/", _form(decoding="sample", temperature="0.5"))
    run = Run.objects.get()
    assert response.status_code == 302
    assert response["Location"] == run.get_absolute_url()
    assert run.status == Run.Status.QUEUED
    assert run.params["temperature"] == 0.5
    assert run.params["max_new_tokens"] == 16
    assert run.trained_loops == 4


def test_greedy_sends_temperature_zero(client) -> None:
    client.post("/playground/", _form(temperature="0.9"))
    assert Run.objects.get().params["temperature"] == 0.0


def test_an_htmx_post_swaps_in_the_run_and_pushes_its_permalink(client) -> None:
    response = client.post("/playground/", _form(), headers={"HX-Request": "true"})
    run = Run.objects.get()
    assert response.status_code == 201
    assert response["HX-Push-Url"] == run.get_absolute_url()
    page = response.content.decode()
    assert page.lstrip().startswith('<section id="run"')
    assert _json_script(response, "run-state")["status"] == "queued"


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"prompt": ""}, "prompt", "This field is required."),
        ({"loops": "9"}, "loops", "was trained with 4 loops"),
        ({"loops": "9", "extrapolate": "on"}, "loops", "At most 8 loops"),
        ({"max_new_tokens": "257"}, "max_new_tokens", "less than or equal to 256"),
        ({"q": "1.5"}, "q", "less than or equal to 1"),
        ({"model": "nope"}, "model", "Select a valid choice"),
    ],
)
def test_bad_input_is_refused_naming_the_field(client, overrides, field, message) -> None:
    response = client.post("/playground/", _form(**overrides))
    page = response.content.decode()
    assert response.status_code == 400
    assert not Run.objects.exists()
    error = re.search(rf'<span class="error" id="id_{field}_error">(.*?)</span>', page, re.S)
    assert error and message in error[1]
    assert re.search(rf'name="{field}"[^>]*aria-invalid="true"', page) or field == "model"


def test_an_htmx_post_with_errors_retargets_the_form(client) -> None:
    response = client.post("/playground/", _form(prompt=""), headers={"HX-Request": "true"})
    assert response.status_code == 400
    assert response["HX-Retarget"] == "#run-form"
    assert response.content.decode().lstrip().startswith('<form id="run-form"')


def test_a_full_queue_is_refused_with_429(client, settings) -> None:
    settings.PLAYGROUND_MAX_QUEUED = 0
    response = client.post("/playground/", _form())
    assert response.status_code == 429
    assert "already queued or running" in response.content.decode()


def test_stop_without_javascript_cancels_and_returns_to_the_run(
    client, run_factory, owner_session
) -> None:
    run = run_factory(**owner_session)
    response = client.post(f"/playground/runs/{run.id}/stop/")
    assert response.status_code == 302
    assert response["Location"] == run.get_absolute_url()
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED


def test_recent_runs_are_listed_newest_first(client, run_factory) -> None:
    older = run_factory(prompt="first prompt")
    newer = run_factory(prompt="second prompt")
    page = client.get("/playground/").content.decode()
    assert page.index(str(newer.id)) < page.index(str(older.id))
    partial = client.get("/playground/runs/", headers={"HX-Request": "true"})
    assert partial.content.decode().lstrip().startswith('<section id="recent-runs"')
    assert "second prompt" in client.get("/playground/runs/").content.decode()


def test_htmx_restoring_a_permalink_from_history_gets_the_whole_page(client, run_factory):
    run = run_factory(status=Run.Status.DONE)
    headers = {"HX-Request": "true", "HX-History-Restore-Request": "true"}
    page = client.get(run.get_absolute_url(), headers=headers).content.decode()
    assert page.startswith("<!doctype html>")
    swap = client.get(run.get_absolute_url(), headers={"HX-Request": "true"}).content.decode()
    assert swap.lstrip().startswith('<section id="run"')
