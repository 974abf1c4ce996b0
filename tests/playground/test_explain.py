"""The run view says why an answer position is deep: its task difficulty by its exit loop."""

from playground.charts import heatmap_figure
from playground.explain import answer_marks, token_reasons
from tests.playground.conftest import make_event


def _events(text: str, exits: list[int]) -> list[dict]:
    return [
        make_event(i, "generated", exit_loop=e) | {"text": c}
        for i, (c, e) in enumerate(zip(text, exits, strict=True))
    ]


def test_the_position_that_writes_each_hops_answer_gets_its_hops():
    events = _events("ab ba;a1=b\nb2=b\n", [1] * 16)

    reasons = token_reasons(task="hops", tokens=events)

    assert reasons[8] == "next token: 1 hop" and reasons[13] == "next token: 2 hops"
    assert [r for i, r in enumerate(reasons) if i not in (8, 13)] == [""] * 14


def test_a_multi_character_token_is_explained_by_its_first_character():
    events = [
        make_event(0, "prompt") | {"text": "99+01="},
        make_event(1, "generated") | {"text": "1"},
        make_event(2, "generated") | {"text": "00"},
    ]

    assert token_reasons(task="addition", tokens=events) == [
        "next token: carry chain 2",
        "next token: carry chain 1",
        "",  # the last token has written nothing yet
    ]


def test_a_text_model_explains_nothing():
    assert token_reasons(task="text", tokens=_events("ab;a1=b", [1] * 7)) == [""] * 7


def test_the_exit_marker_hover_names_the_difficulty():
    events = _events("ab ba;a1=b", [2] * 10)
    reasons = token_reasons(task="hops", tokens=events)

    figure = heatmap_figure(loops=4, tokens=events, reasons=reasons)

    hovers = figure["data"][2]["hovertext"]
    assert hovers[8].endswith("exits at loop 2 (next token: 1 hop)")
    assert hovers[9].endswith("exits at loop 2")


def test_each_generated_hops_answer_is_marked_right_or_wrong_with_what_was_expected():
    # given a prompt of two queries (f1 = d, f3 = h) and generated answers d (right), x
    prompt = "ga dc fd be af eg ch hb;f1="
    events = [make_event(0, "prompt") | {"text": prompt}] + [
        make_event(i, "generated") | {"text": c} for i, c in enumerate("d\nf3=x", start=1)
    ]
    # when
    marks = answer_marks(task="hops", tokens=events)
    # then only the two answer tokens are marked, with the expected letter
    assert [(m.right, m.expected) if m else None for m in marks] == [
        None,
        (True, "d"),
        None,
        None,
        None,
        None,
        (False, "h"),
    ]
    wrong = marks[6]
    assert wrong is not None and wrong.title == "answer ✗: expected 'h'"


def test_a_sums_digits_are_marked_and_a_text_model_is_not():
    events = [make_event(0, "prompt") | {"text": "99+01="}] + [
        make_event(i, "generated") | {"text": c} for i, c in enumerate("190", start=1)
    ]
    marks = answer_marks(task="addition", tokens=events)
    assert [m.symbol if m else None for m in marks] == [None, "✓", "✗", "✓"]  # 100
    assert answer_marks(task="text", tokens=events) == [None] * 4
