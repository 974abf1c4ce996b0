"""Comparing runs: siblings from "Compare with…", their alignment, the page and the API."""

import csv
import io
import math
import uuid

import pytest

from playground import services
from playground.comparison import comparison_of
from playground.models import Run, RunToken
from playground.pages import run_view
from playground.siblings import FREE_RUNNING, SAME_TEXT, TEXT_OF, preset_variants, sibling_params
from tests.playground.conftest import PROMPT, make_event

SETTINGS = ("exit_rule", "q", "kl_threshold", "fixed_loops", "act_eps", "kv_policy")


def _event(position: int, token_id: int, exit_loop: int, top: list, phase: str = "generated"):
    event = make_event(position, phase, exit_loop=exit_loop)
    event["token_id"], event["text"] = token_id, chr(token_id)
    event["loops"][-1]["top"] = top
    return event


def _stored(run: Run, events: list[dict]) -> Run:
    RunToken.objects.bulk_create([RunToken.from_event(run, event) for event in events])
    return run


def _views(*runs: Run):
    return [run_view(run=run, tokens=list(run.tokens.order_by("position"))) for run in runs]


@pytest.fixture
def origin(run_factory) -> Run:
    params = {"max_new_tokens": 8, "q": 0.7, "loops": None, "seed": 11, "temperature": 0.8}
    return run_factory(status=Run.Status.DONE, params=params)


# -- siblings


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("preset", "changed"),
    [
        ("q", [{"q": 0.5}, {"q": 0.9}]),
        ("kv-policies", [{"kv_policy": "select"}, {"kv_policy": "recompute-kv"}]),
        ("kv-reuse", [{"kv_policy": "exit-kv"}, {"kv_policy": "first-loop-kv"}]),
        (
            "exit-rules",
            [{"exit_rule": "convergence"}, {"exit_rule": "fixed", "fixed_loops": 4}],
        ),
    ],
)
def test_siblings_share_prompt_model_and_seed_and_differ_only_in_the_setting(
    origin, preset, changed, django_capture_on_commit_callbacks
) -> None:
    # given a finished run at q 0.7, best-available KV, Q-exit
    # when a preset comparison starts its siblings
    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        siblings = services.run_compare_submit(
            run=origin, variants=preset_variants(origin, preset), visitor="session:v"
        )
    # then there are two, queued together, of the same prompt, model and seed
    assert len(siblings) == len(enqueued) == 2
    own = sibling_params(origin, {})
    for sibling, change in zip(siblings, changed, strict=True):
        assert (sibling.prompt, sibling.model, sibling.compare_of) == (PROMPT, "ouro-tiny", origin)
        assert sibling.params["seed"] == 11 and sibling.params["temperature"] == 0.8
        # and each is scored on the run's text (the default mode), with the chosen setting
        assert sibling.params.pop(TEXT_OF) == str(origin.id)
        differing = {k: v for k, v in sibling.params.items() if own.get(k) != v}
        assert differing == change
        assert set(differing) <= set(SETTINGS)


@pytest.mark.django_db
def test_a_compare_group_holds_one_active_slot_of_the_visitor(
    run_factory, origin, django_capture_on_commit_callbacks, settings
) -> None:
    # given a visitor with one run of their own running (the limit is two)
    settings.PLAYGROUND_VISITOR_ACTIVE = 2
    run_factory(status=Run.Status.RUNNING, visitor="session:v")
    with django_capture_on_commit_callbacks(execute=False):
        # when they compare a run with two siblings
        siblings = services.run_compare_submit(
            run=origin, variants=preset_variants(origin, "q"), visitor="session:v"
        )
        # then both start: the group takes their second slot
        assert len(siblings) == 2
        # and a third sibling of the same run is refused, as is another run of theirs
        with pytest.raises(services.VisitorLimit, match="comparing with this one"):
            services.run_compare_submit(run=origin, variants=[{"q": 0.3}], visitor="session:v")
        with pytest.raises(services.VisitorLimit, match="PLAYGROUND_VISITOR_ACTIVE"):
            services.run_submit(prompt=PROMPT, visitor="session:v")


@pytest.mark.django_db
def test_a_visitor_at_the_limit_cannot_start_a_comparison(
    run_factory, origin, django_capture_on_commit_callbacks, settings
) -> None:
    # given a visitor with two runs running
    settings.PLAYGROUND_VISITOR_ACTIVE = 2
    for _ in range(2):
        run_factory(status=Run.Status.RUNNING, visitor="session:v")
    # when they compare, then nothing starts
    with django_capture_on_commit_callbacks(execute=False), pytest.raises(services.VisitorLimit):
        services.run_compare_submit(
            run=origin, variants=preset_variants(origin, "q"), visitor="session:v"
        )
    assert not Run.objects.filter(compare_of=origin).exists()


@pytest.mark.django_db
def test_a_bad_sibling_setting_is_refused_naming_it(origin) -> None:
    with pytest.raises(services.ValidationError) as refused:
        services.run_compare_submit(run=origin, variants=[{"q": 1.5}], visitor="session:v")
    assert "q" in refused.value.message_dict


# -- alignment


@pytest.mark.django_db
def test_identical_runs_show_no_divergence_and_every_position_is_compared(run_factory) -> None:
    # given two runs with the same tokens and exits
    events = [_event(p, 100 + p, 2, [[101 + p, "x", 0.5]]) for p in range(6)]
    a, b = (_stored(run_factory(), events) for _ in range(2))
    # when
    comparison = comparison_of(_views(a, b))
    # then
    assert comparison.divergence is None
    assert all(position.compared and position.same_token for position in comparison.positions)
    assert [position.difference for position in comparison.positions] == [0] * 6
    agreement = comparison.runs[1].agreement
    assert agreement is not None and agreement.top1 == 1.0 and agreement.top1_positions == 6
    assert agreement.loglik_difference == 0.0 and agreement.loglik_positions == 5
    assert not any(row.differs for row in comparison.stats if row.key in ("top1", "loglik"))


@pytest.mark.django_db
def test_diverging_runs_mark_the_first_differing_position_and_stop_comparing_there(
    run_factory,
) -> None:
    # given run B exits deeper at position 1 and generates another token at position 3
    shallow = [_event(p, 100 + p, 1, [[101 + p, "x", 0.4]]) for p in range(6)]
    deep = [_event(p, 100 + p, 3 if p == 1 else 1, [[101 + p, "x", 0.8]]) for p in range(6)]
    deep[2]["loops"][-1]["top"] = [[999, "y", 0.6], [103, "x", 0.2]]
    for event in deep[3:]:
        event["token_id"] = 999
    a = _stored(run_factory(), shallow)
    b = _stored(run_factory(), deep)
    # when
    comparison = comparison_of(_views(a, b))
    # then the divergence is the first differing token, and depths are compared before it
    assert comparison.divergence == 3
    assert [p.compared for p in comparison.positions] == [True] * 3 + [False] * 3
    assert [p.difference for p in comparison.positions] == [0, 2, 0, None, None, None]
    assert [p.vs_deepest for p in comparison.positions][:2] == [[0, 0], [-2, 0]]
    # and agreement with the deeper run counts the compared positions only
    assert comparison.deepest == 1 and comparison.runs[1].agreement is None
    agreement = comparison.runs[0].agreement
    assert agreement is not None
    assert (agreement.top1, agreement.top1_positions) == (2 / 3, 3)
    # (the next token is the same at positions 0 and 1 only: log 0.4 - log 0.8 each)
    assert agreement.loglik_positions == 2
    assert agreement.loglik_difference == pytest.approx(math.log(0.4 / 0.8))
    rows = {row.key: row for row in comparison.stats}
    assert rows["top1"].differs and rows["loglik"].differs and rows["average_depth"].differs


@pytest.mark.django_db
def test_a_run_still_streaming_is_compared_up_to_its_last_token(run_factory) -> None:
    events = [_event(p, 100 + p, 2, [[101 + p, "x", 0.5]]) for p in range(5)]
    a = _stored(run_factory(), events)
    b = _stored(run_factory(status=Run.Status.RUNNING), events[:3])
    comparison = comparison_of(_views(a, b))
    assert comparison.divergence is None and comparison.live
    assert [p.compared for p in comparison.positions] == [True] * 3 + [False] * 2


# -- the API


@pytest.fixture
def three(run_factory) -> list[Run]:
    runs = []
    for q in (0.5, 0.7, 0.9):
        params = {"max_new_tokens": 8, "q": q, "loops": None, "seed": 0}
        events = [_event(p, 100 + p, 1 + (p % 3), [[101 + p, "x", q]]) for p in range(4)]
        runs.append(_stored(run_factory(status=Run.Status.DONE, params=params), events))
    return runs


def _ids(runs) -> str:
    return ",".join(str(run.id) for run in runs)


@pytest.mark.django_db
def test_the_compare_api_gives_the_comparison_as_json(client, three) -> None:
    response = client.get(f"/api/v1/runs/compare/?runs={_ids(three)}")
    assert response.status_code == 200
    body = response.json()
    assert [run["id"] for run in body["runs"]] == [str(run.id) for run in three]
    assert body["divergence"] is None and body["deepest"] == str(three[0].id)
    assert len(body["positions"]) == 4 and body["positions"][1]["difference"] == 0
    assert {row["key"]: row["differs"] for row in body["stats"]}["settings"] is True


@pytest.mark.django_db
def test_the_compare_csv_has_one_row_per_position_and_run(client, three) -> None:
    response = client.get(f"/api/v1/runs/compare/?runs={_ids(three)}&format=csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == 4 * 3
    assert [(row["position"], row["label"]) for row in rows[:3]] == [
        ("0", "A"),
        ("0", "B"),
        ("0", "C"),
    ]
    assert rows[5]["run"] == str(three[2].id) and rows[5]["exit_loop"] == "2"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("runs", "named"),
    [
        ("", "give 1 to 3"),
        ("not-a-uuid", "is not a run id"),
        ("many", "at most 3 runs"),
        ("twice", "more than once"),
        ("other prompt", "different prompts"),
        ("other model", "different models"),
    ],
)
def test_the_compare_api_answers_400_naming_each_bad_input(
    client, three, run_factory, runs, named
) -> None:
    # given runs that cannot be compared, each way
    ids = {
        "many": _ids([*three, run_factory()]),
        "twice": _ids([three[0], three[0]]),
        "other prompt": _ids([three[0], run_factory(prompt="def sub(a, b):")]),
        "other model": _ids([three[0], run_factory(model="hop-loop")]),
    }.get(runs, runs)
    # when
    response = client.get(f"/api/v1/runs/compare/?runs={ids}")
    # then
    assert response.status_code == 400
    assert named in response.json()["errors"]["runs"][0]


@pytest.mark.django_db
def test_the_compare_api_answers_404_naming_a_well_formed_id_of_no_run(client, three) -> None:
    missing = str(uuid.UUID(int=7))
    response = client.get(f"/api/v1/runs/compare/?runs={three[0].id},{missing}")
    assert response.status_code == 404
    assert response.json()["detail"] == f"no run with id {missing}"


@pytest.mark.django_db
def test_the_compare_page_answers_404_naming_a_well_formed_id_of_no_run(client, three) -> None:
    missing = str(uuid.UUID(int=7))
    response = client.get(f"/playground/compare/?runs={three[0].id},{missing}")
    assert response.status_code == 404
    assert f"no run with id {missing}" in response.content.decode()


@pytest.mark.django_db
def test_the_compare_api_is_in_the_schema(client) -> None:
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operation = schema["paths"]["/api/v1/runs/compare/"]["get"]
    query = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}
    assert query["runs"]["required"] and "csv" in query["format"]["schema"]["enum"]
    assert {"200", "400", "404"} <= set(operation["responses"])


# -- the pages


@pytest.mark.django_db
def test_the_compare_view_shows_heatmaps_rows_text_and_marks_rows_that_differ(
    client, three
) -> None:
    response = client.get(f"/playground/compare/?runs={_ids(three)}")
    html = response.content.decode()
    assert response.status_code == 200
    assert html.count("data-heatmap") == 3 and html.count('id="heatmap-figure-') == 3
    assert 'id="depth-row"' in html and 'id="aligned-text"' in html
    assert '<tr data-stat="settings" class="differs">' in html
    assert "No divergence" in html


@pytest.mark.django_db
def test_the_compare_view_names_a_bad_request(client, run_factory) -> None:
    response = client.get("/playground/compare/?runs=not-a-uuid")
    assert response.status_code == 400
    assert "is not a run id" in response.content.decode()


@pytest.mark.django_db
def test_compare_with_from_a_run_page_starts_siblings_and_opens_the_view(
    client, origin, django_capture_on_commit_callbacks
) -> None:
    # given the run's page offers Compare with…
    page = client.get(origin.get_absolute_url()).content.decode()
    assert "Compare with…" in page and f"/playground/runs/{origin.id}/compare/" in page
    # when the q preset is chosen
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(f"/playground/runs/{origin.id}/compare/", {"compare-preset": "q"})
    # then two siblings belong to this session and the compare view opens on all three
    siblings = list(Run.objects.filter(compare_of=origin).order_by("params__q"))
    assert [sibling.params["q"] for sibling in siblings] == [0.5, 0.9]
    assert response.status_code == 302
    assert response["Location"] == f"/playground/compare/?runs={_ids([origin, *siblings])}"
    assert all(sibling.visitor.startswith("session:") for sibling in siblings)


@pytest.mark.django_db
def test_compare_with_a_free_choice_changes_what_was_chosen(
    client, origin, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        client.post(
            f"/playground/runs/{origin.id}/compare/",
            {
                "compare-preset": "custom",
                "compare-first_exit_rule": "q-exit",
                "compare-first_q": "0.7",
                "compare-first_kv_policy": "select",
                "compare-mode": FREE_RUNNING,
            },
        )
    (sibling,) = Run.objects.filter(compare_of=origin)
    own = sibling_params(origin, {})
    assert TEXT_OF not in sibling.params  # free-running: it writes its own text
    assert {k: v for k, v in sibling.params.items() if own[k] != v} == {"kv_policy": "select"}


@pytest.mark.django_db
def test_the_compare_view_marks_the_divergence_and_refreshes_its_comparison_alone(
    client, run_factory
) -> None:
    # given two runs whose generated tokens differ from position 3
    events = [_event(p, 100 + p, 2, [[101 + p, "x", 0.5]]) for p in range(5)]
    other = [dict(event, token_id=120) if event["position"] >= 3 else event for event in events]
    ids = _ids([_stored(run_factory(), events), _stored(run_factory(), other)])
    # when the page's module asks for the comparison while the runs stream (htmx region)
    page = client.get(f"/playground/compare/?runs={ids}").content.decode()
    region = client.get(f"/playground/compare/?runs={ids}", HTTP_HX_REQUEST="true")
    # then the page says where they diverge, and the region is the comparison only
    assert 'data-position="3"' in page and "The runs diverge at position 3" in page
    assert page.count('class="divergence"') >= 2  # the position's header and its text cell
    html = region.content.decode()
    assert html.lstrip().startswith('<div id="comparison"') and 'data-live="true"' in html
    assert "data-heatmap" not in html


@pytest.mark.django_db
def test_a_same_text_comparison_compares_every_position_and_says_so(client, run_factory) -> None:
    # given a run and a sibling scored on its tokens, deeper at every other position
    events = [_event(p, 100 + p, 2, [[101 + p, "x", 0.5]]) for p in range(8)]
    origin = _stored(run_factory(status=Run.Status.DONE), events)
    forced = [e | {"exit_loop": 3 if e["position"] % 2 else 2} for e in events]
    params = {"q": 0.9, "seed": 0, TEXT_OF: str(origin.id)}
    sibling = _stored(run_factory(status=Run.Status.DONE, params=params, compare_of=origin), forced)
    # when they are compared
    comparison = comparison_of(_views(origin, sibling))
    # then it is a same-text comparison and every position's depth is compared
    assert comparison.mode == SAME_TEXT and comparison.divergence is None
    assert [p.difference for p in comparison.positions] == [0, 1] * 4
    # and the page, the JSON and the CSV carry the mode
    ids = f"{origin.id},{sibling.id}"
    page = client.get(f"/playground/compare/?runs={ids}").content.decode()
    assert 'data-mode="same-text"' in page and "scored on run A’s tokens" in page
    data = client.get(f"/api/v1/runs/compare/?runs={ids}").json()
    assert data["mode"] == SAME_TEXT
    rows = list(
        csv.reader(
            io.StringIO(client.get(f"/api/v1/runs/compare/?runs={ids}&format=csv").content.decode())
        )
    )
    assert rows[0][0] == "mode" and {row[0] for row in rows[1:]} == {SAME_TEXT}
    # and two free runs read as free-running
    free = _stored(run_factory(status=Run.Status.DONE), events)
    assert comparison_of(_views(origin, free)).mode == FREE_RUNNING


@pytest.mark.django_db
def test_same_text_waits_for_the_run_to_end(run_factory) -> None:
    running = run_factory(status=Run.Status.RUNNING)
    with pytest.raises(services.ValidationError) as refused:
        services.run_compare_submit(run=running, variants=[{"q": 0.5}], visitor="session:v")
    assert "mode" in refused.value.message_dict
