"""Branching a run at a token: the sibling's prompt, its limits, the page, the API."""

import pytest

from playground import services
from playground.branching import BRANCH_OF, BranchError, branch_choices, branch_make
from playground.checkpoints import ModelInfo, model_get, prompt_encode
from playground.comparison import runs_compare
from playground.models import Run, RunToken
from playground.siblings import run_settings
from tests.playground.conftest import PROMPT, make_event

GENERATED = "xyz"


def _events(prompt_ids: list[int], generated_ids: list[int], texts: list[str]) -> list[dict]:
    """Events as a run stores them: prompt, then generated, each with its ids and text."""
    events = []
    for position, token_id in enumerate([*prompt_ids, *generated_ids]):
        phase = "prompt" if position < len(prompt_ids) else "generated"
        event = make_event(position, phase, exit_loop=2)
        event["token_id"], event["text"] = token_id, texts[position]
        events.append(event)
    return events


def _byte_events(prompt: str = PROMPT, generated: str = GENERATED) -> list[dict]:
    ids = list(prompt.encode())
    return _events(ids, list(generated.encode()), [chr(i) for i in ids] + list(generated))


def _model(name: str) -> ModelInfo:
    model = model_get(name=name)
    assert model is not None
    return model


@pytest.fixture
def tiny() -> ModelInfo:
    return _model("ouro-tiny")


@pytest.fixture
def finished(run_factory) -> Run:
    run = run_factory(status=Run.Status.DONE, visitor="session:owner")
    RunToken.objects.bulk_create([RunToken.from_event(run, e) for e in _byte_events()])
    return run


# -- the prompt


def test_a_branch_at_the_first_generated_token_is_the_prompt_plus_the_choice(tiny) -> None:
    # when the first generated token ("x") is replaced by "Q"
    branch = branch_make(
        prompt=PROMPT, model=tiny, tokens=_byte_events(), position=len(PROMPT), token_id=ord("Q")
    )
    # then the sibling reads the prompt and "Q", which the worker encodes back to those ids
    assert branch.prompt == PROMPT + "Q"
    assert prompt_encode(model=tiny, text=branch.prompt) == [*PROMPT.encode(), ord("Q")]


def test_a_branch_at_the_last_position_keeps_every_generated_token_before_it(tiny) -> None:
    last = len(PROMPT) + len(GENERATED) - 1
    branch = branch_make(
        prompt=PROMPT, model=tiny, tokens=_byte_events(), position=last, token_id=ord("!")
    )
    assert branch.prompt == PROMPT + "xy!"
    assert (branch.position, branch.token_id) == (last, ord("!"))


def test_a_branch_round_trips_through_a_trained_tokenizer() -> None:
    # given a run of the shipped BPE model whose text was tokenised by that model
    model = _model("pydoc-loop")
    prompt, generated = "def area(width, height):\n    return", " width * height"
    prompt_ids = prompt_encode(model=model, text=prompt)
    full_ids = prompt_encode(model=model, text=prompt + generated)
    assert full_ids[: len(prompt_ids)] == prompt_ids
    generated_ids = full_ids[len(prompt_ids) :]
    texts = ["·"] * len(full_ids)  # the stored texts play no part in the prompt
    events = _events(prompt_ids, generated_ids, texts)
    # when the second generated token is replaced by the first one's (" width" → " width")
    position = len(prompt_ids) + 1
    choice = prompt_encode(model=model, text=prompt + " height")[len(prompt_ids)]
    branch = branch_make(
        prompt=prompt, model=model, tokens=events, position=position, token_id=choice
    )
    # then the prompt is the prefix and the choice, and it encodes into exactly those ids
    expected = [*full_ids[:position], choice]
    assert branch.prompt.startswith(prompt + " width")
    assert prompt_encode(model=model, text=branch.prompt) == expected


@pytest.mark.parametrize(
    ("position", "token_id", "field", "message"),
    [
        (0, ord("Q"), "position", "generated position"),  # a prompt position
        (len(PROMPT) + 3, ord("Q"), "position", "generated position"),  # past the end
        (len(PROMPT), ord("x"), "token_id", "the token the run generated"),
        (len(PROMPT), 300, "token_id", "not a token of the model"),
        (len(PROMPT), 0xC3, "token_id", "would not be read back"),  # half a character
    ],
)
def test_a_branch_that_cannot_be_made_names_the_field(
    tiny, position, token_id, field, message
) -> None:
    with pytest.raises(BranchError, match=message) as refused:
        branch_make(
            prompt=PROMPT, model=tiny, tokens=_byte_events(), position=position, token_id=token_id
        )
    assert refused.value.field == field


def test_the_choices_are_the_previous_positions_top_k_at_its_exit_loop() -> None:
    events = _byte_events()
    events[len(PROMPT) - 1]["loops"][1]["top"] = [[120, "x", 0.6], [81, "Q", 0.3]]
    assert branch_choices(events, len(PROMPT)) == [[120, "x", 0.6], [81, "Q", 0.3]]
    assert branch_choices(events, 0) == []


# -- the sibling


@pytest.mark.django_db
def test_a_branch_is_a_sibling_with_the_same_settings(
    finished, django_capture_on_commit_callbacks
) -> None:
    position = len(PROMPT) + 1
    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        sibling = services.run_branch_submit(
            run=finished, position=position, token_id=ord("Q"), visitor="session:v"
        )
    assert len(enqueued) == 1
    assert (sibling.prompt, sibling.model, sibling.compare_of) == (
        PROMPT + "xQ",
        "ouro-tiny",
        finished,
    )
    assert sibling.params.pop(BRANCH_OF) == {
        "run": str(finished.id),
        "position": position,
        "token_id": ord("Q"),
    }
    assert run_settings(sibling) == run_settings(finished)


@pytest.mark.django_db
def test_a_non_owner_cannot_branch_a_running_run_beyond_the_sibling_limit(
    run_factory, settings, django_capture_on_commit_callbacks
) -> None:
    # given someone else's run, still running
    settings.PLAYGROUND_VISITOR_ACTIVE = 2
    running = run_factory(status=Run.Status.RUNNING, visitor="session:owner")
    RunToken.objects.bulk_create([RunToken.from_event(running, e) for e in _byte_events()])
    with django_capture_on_commit_callbacks(execute=False):
        # when another visitor branches it twice, then both start (one slot between them)
        for token in "QR":
            services.run_branch_submit(
                run=running, position=len(PROMPT), token_id=ord(token), visitor="session:other"
            )
        # and a third is refused, as a third sibling of any comparison is
        with pytest.raises(services.VisitorLimit, match="comparing with this one"):
            services.run_branch_submit(
                run=running, position=len(PROMPT), token_id=ord("S"), visitor="session:other"
            )
    assert Run.objects.filter(compare_of=running, visitor="session:other").count() == 2


@pytest.mark.django_db
def test_a_bad_branch_is_a_validation_error_naming_the_field(finished) -> None:
    with pytest.raises(services.ValidationError) as refused:
        services.run_branch_submit(run=finished, position=1, token_id=ord("Q"))
    assert "position" in refused.value.message_dict
    assert not Run.objects.filter(compare_of=finished).exists()


# -- the page and the API


@pytest.mark.django_db
def test_a_branch_from_the_run_page_opens_the_compare_view_at_the_branch_point(
    client, finished, django_capture_on_commit_callbacks
) -> None:
    # given the run page's branch form
    page = client.get(finished.get_absolute_url()).content.decode()
    assert f"/playground/runs/{finished.id}/branch/" in page and 'id="branch-panel"' in page
    # when a token is chosen at the first generated position
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            f"/playground/runs/{finished.id}/branch/",
            {"position": len(PROMPT), "token_id": ord("Q")},
        )
    # then the branch opens beside the run
    (sibling,) = Run.objects.filter(compare_of=finished)
    assert response.status_code == 302
    assert response["Location"] == f"/playground/compare/?runs={finished.id},{sibling.id}"
    # and once it has tokens, the compare view marks the branch point as the divergence
    branched = _events([*PROMPT.encode(), ord("Q")], [ord("z")], [*PROMPT, "Q", "z"])
    RunToken.objects.bulk_create([RunToken.from_event(sibling, e) for e in branched])
    comparison = runs_compare(raw=f"{finished.id},{sibling.id}")
    assert comparison.divergence == len(PROMPT)
    assert comparison.branch == {
        "label": "B",
        "parent": "A",
        "position": len(PROMPT),
        "chosen": "Q",
        "replaced": "x",
    }
    html = client.get(response["Location"]).content.decode()
    assert f'id="branch-point" class="message info" data-position="{len(PROMPT)}"' in html
    assert "branch-point" in html.split('id="depth-row"')[1]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"position": "x", "token_id": "81"}, "position"),
        ({"position": str(len(PROMPT))}, "token_id"),
        ({"position": "999", "token_id": "81"}, "position"),
    ],
)
def test_a_bad_branch_from_the_page_is_a_400_naming_it(client, finished, data, named) -> None:
    response = client.post(f"/playground/runs/{finished.id}/branch/", data)
    assert response.status_code == 400
    assert f"{named}:" in response.content.decode()


@pytest.mark.django_db
def test_the_api_branches_a_run(client, finished, django_capture_on_commit_callbacks) -> None:
    # when
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            f"/api/v1/runs/{finished.id}/branch/",
            {"position": len(PROMPT) + 2, "token_id": ord("!")},
            content_type="application/json",
        )
    # then a sibling of the branch's prompt, with its own cancel token and the compare link
    assert response.status_code == 201, response.content
    body = response.json()
    sibling = Run.objects.get(pk=body["id"])
    assert sibling.prompt == PROMPT + "xy!" and sibling.compare_of == finished
    assert body["cancel_token"]
    assert body["compare_url"].endswith(f"/playground/compare/?runs={finished.id},{sibling.id}")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"position": 1, "token_id": 81}, "position"),
        ({"position": len(PROMPT), "token_id": -1}, "token_id"),
        ({"position": len(PROMPT), "token_id": 5000}, "token_id"),
        ({"token_id": 81}, "position"),
    ],
)
def test_a_bad_api_branch_is_a_400_naming_the_field(client, finished, data, named) -> None:
    response = client.post(
        f"/api/v1/runs/{finished.id}/branch/", data, content_type="application/json"
    )
    assert response.status_code == 400
    assert named in response.json()["errors"]


@pytest.mark.django_db
def test_the_worker_reads_a_branch_as_the_prefix_and_the_chosen_token(
    run_factory, django_capture_on_commit_callbacks
) -> None:
    from workers import execution

    # given a run the worker generated greedily
    run = run_factory(params={"max_new_tokens": 6, "q": 0.7, "seed": 0})
    execution.run_execute(run_id=run.id, worker="w")
    stored = [token.data for token in run.tokens.order_by("position")]
    # and a branch at its first generated token, to a letter it did not write
    position = len(PROMPT)
    choice = ord("R") if stored[position]["token_id"] == ord("Q") else ord("Q")
    with django_capture_on_commit_callbacks(execute=False):
        sibling = services.run_branch_submit(
            run=run, position=position, token_id=choice, visitor="session:v"
        )
    # when the worker runs the branch
    execution.run_execute(run_id=sibling.id, worker="w")
    # then its positions hold the run's tokens up to the branch, then the chosen one
    sibling.refresh_from_db()
    assert sibling.status == Run.Status.DONE, sibling.error
    ids = [token.token_id for token in sibling.tokens.order_by("position")]
    assert ids[:position] == [event["token_id"] for event in stored[:position]]
    assert ids[position] == choice
