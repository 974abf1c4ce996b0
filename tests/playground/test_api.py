import csv
import io
from unittest import mock

import pytest
from django.utils import timezone

from playground import services
from playground.models import Run
from playground.visitors import secret_hash
from tests.playground.conftest import PROMPT

RUNS = "/api/v1/runs/"


@pytest.fixture
def post(client):
    def send(body: dict):
        return client.post(RUNS, body, content_type="application/json")

    return send


@pytest.mark.django_db
def test_submit_answers_201_with_the_run_and_its_links(post, django_capture_on_commit_callbacks):
    # when
    with (
        mock.patch.object(services, "run_enqueue") as enqueue,
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = post({"prompt": PROMPT, "q": 0.5, "max_new_tokens": 8})

    # then
    body = response.json()
    run = Run.objects.get()
    assert response.status_code == 201
    assert response["Location"] == body["url"] == f"/playground/runs/{run.id}/"
    assert body["id"] == str(run.id)
    assert body["events_url"] == f"/runs/{run.id}/events"
    assert body["tokens_url"] == f"/api/v1/runs/{run.id}/tokens/"
    assert body["cancel_url"] == f"/api/v1/runs/{run.id}/cancel/"
    assert (body["status"], body["model"], body["trained_loops"]) == ("queued", "ouro-tiny", 4)
    assert body["params"]["q"] == 0.5 and body["params"]["max_new_tokens"] == 8
    assert body["stats"] == {} and body["error"] == ""
    enqueue.assert_called_once_with(run=run)


@pytest.mark.parametrize(
    ("field", "body"),
    [
        ("prompt", {"prompt": None}),
        ("prompt", {"prompt": ""}),
        ("prompt", {"prompt": "x" * 2001}),
        ("prompt", {"prompt": "x" * 480}),  # too many tokens with 64 new ones
        ("q", {"q": 0}),
        ("q", {"q": 1.01}),
        ("q", {"q": "high"}),
        ("loops", {"loops": 5}),
        ("loops", {"loops": 9, "extrapolate": True}),
        ("loops", {"loops": 0}),
        ("kv_policy", {"kv_policy": "everything"}),
        ("exit_rule", {"exit_rule": "sometimes"}),
        ("max_new_tokens", {"max_new_tokens": 257}),
        ("temperature", {"temperature": -1}),
        ("top_p", {"top_p": 0}),
        ("top_p", {"top_p": 1.5}),
        ("seed", {"seed": "lucky"}),
        ("model", {"model": "gpt-9"}),
    ],
)
@pytest.mark.django_db
def test_out_of_range_input_is_a_400_naming_the_field(post, field, body):
    # when
    response = post({"prompt": PROMPT} | body)

    # then
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()
    assert response.json()["detail"].startswith(field)
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_missing_model_directory_is_a_400_not_a_crash(post, settings, tmp_path):
    # given
    settings.PLAYGROUND_MODELS = {"pydoc-loop": tmp_path / "pydoc-loop"}

    # when
    response = post({"prompt": PROMPT})

    # then
    assert response.status_code == 400
    assert "is not available" in response.json()["errors"]["model"][0]


@pytest.mark.django_db
def test_a_full_queue_is_a_429_with_a_clear_message(post, settings, run_factory):
    # given
    settings.PLAYGROUND_MAX_QUEUED = 1
    run_factory(status="running", heartbeat_at=timezone.now())

    # when
    response = post({"prompt": PROMPT})

    # then
    assert response.status_code == 429
    assert response.json()["detail"].startswith("The playground is busy: 1 runs")


def test_runs_are_listed_newest_first_in_pages(client, run_factory, django_assert_num_queries):
    # given
    runs = [run_factory() for _ in range(3)]

    # when
    with django_assert_num_queries(2):  # count + page
        response = client.get(RUNS, {"page_size": 2})

    # then
    body = response.json()
    assert body["count"] == 3
    assert [run["id"] for run in body["results"]] == [str(runs[2].id), str(runs[1].id)]
    assert body["next"]


def test_an_unknown_parameter_is_a_400(client, db):
    # when
    response = client.get(RUNS, {"stauts": "done"})

    # then
    assert response.status_code == 400 and "stauts" in response.json()["errors"]


def test_a_run_is_read_by_id(client, run_factory):
    # given
    run = run_factory(status="done", stats={"average_exit_loop": 2.5})

    # when
    body = client.get(f"{RUNS}{run.id}/").json()

    # then
    assert body["status"] == "done" and body["stats"] == {"average_exit_loop": 2.5}


def test_an_unknown_run_is_a_404(client, db):
    # when
    response = client.get(f"{RUNS}00000000-0000-0000-0000-000000000000/")

    # then
    assert response.status_code == 404 and "No run" in response.json()["detail"]


def test_a_missing_prompt_is_a_400(post, db):
    # when
    response = post({"q": 0.5})

    # then
    assert response.status_code == 400 and "prompt" in response.json()["errors"]


def test_tokens_export_as_json(client, run_factory, django_assert_num_queries):
    # given
    run = run_factory(tokens=5, prompt_tokens=3, status="done")

    # when
    with django_assert_num_queries(2):  # the run + its tokens
        tokens = client.get(f"{RUNS}{run.id}/tokens/").json()

    # then
    assert [t["position"] for t in tokens] == [0, 1, 2, 3, 4]
    assert [t["phase"] for t in tokens] == ["prompt"] * 3 + ["generated"] * 2
    assert tokens[0] == {
        "position": 0,
        "phase": "prompt",
        "token_id": 97,
        "text": "a",
        "exit_loop": 2,
        "loops_computed": 2,
        "loops": tokens[0]["loops"],
    }
    assert [loop["cumulative"] for loop in tokens[0]["loops"]] == [0.3, 0.6]


@pytest.mark.parametrize("how", [{"format": "csv"}, {"HTTP_ACCEPT": "text/csv"}])
def test_tokens_export_as_csv_with_cumulative_per_loop(client, run_factory, how):
    # given
    run = run_factory(tokens=2, prompt_tokens=1, status="done")
    query = {key: value for key, value in how.items() if key == "format"}
    headers = {key: value for key, value in how.items() if key != "format"}

    # when
    response = client.get(f"{RUNS}{run.id}/tokens/", query, **headers)

    # then
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert f"run-{run.id}-tokens.csv" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == [
        "position", "phase", "token_id", "text", "exit_loop", "loops_computed",
        "cumulative_1", "cumulative_2", "cumulative_3", "cumulative_4",
    ]  # fmt: skip
    assert rows[1] == ["0", "prompt", "97", "a", "2", "2", "0.3", "0.6", "", ""]
    assert rows[2][1] == "generated"


def test_a_token_that_starts_like_a_formula_is_inert_in_the_csv(client, run_factory):
    # given a model token a spreadsheet would run
    run = run_factory(tokens=2, prompt_tokens=1, status="done")
    run.tokens.filter(position=1).update(text="=HYPERLINK(1)")

    # when
    response = client.get(f"{RUNS}{run.id}/tokens/", {"format": "csv"})

    # then its cell starts with an apostrophe; the numbers stay numbers
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[2][3] == "'=HYPERLINK(1)"
    assert rows[2][0] == "1"


def test_an_unknown_export_format_is_a_400(client, run_factory):
    # given
    run = run_factory()

    # when
    response = client.get(f"{RUNS}{run.id}/tokens/", {"format": "xml"})

    # then
    assert response.status_code == 400 and "format" in response.json()["errors"]


def test_cancel_with_the_runs_token_answers_202(client, run_factory):
    # given
    run = run_factory(
        status="running", heartbeat_at=timezone.now(), owner_hash=secret_hash("its-token")
    )

    # when
    response = client.post(f"{RUNS}{run.id}/cancel/", headers={"X-Cancel-Token": "its-token"})

    # then
    assert response.status_code == 202
    assert response.json()["cancel_requested"] is True
    run.refresh_from_db()
    assert run.cancel_requested


def test_the_models_are_listed_with_their_loops(client, settings, tmp_path, db):
    # given
    from tests.playground.conftest import TINY

    settings.PLAYGROUND_MODELS = {"ouro-tiny": TINY, "gone": tmp_path / "gone"}

    # when
    models = client.get(f"{RUNS}models/").json()

    # then
    assert [(m["name"], m["available"], m["loops"]) for m in models] == [
        ("ouro-tiny", True, 4),
        ("gone", False, None),
    ]


def test_the_schema_documents_the_runs_endpoints(client, db):
    # when
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    # then
    assert "/api/v1/runs/" in schema["paths"]
    assert "/api/v1/runs/{id}/tokens/" in schema["paths"]
    assert "post" in schema["paths"]["/api/v1/runs/{id}/cancel/"]
