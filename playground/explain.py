"""Why a run's positions took the loops they took, for the run view.

A task model's answer tokens each have a difficulty that the text states (the carry chain
into a sum digit's column, the hops a query asks for: :mod:`kernels.difficulty`). A
position's exit loop is the depth at which it wrote the *next* token, so the run view
shows the difficulty of the next token beside each position's exit loop: the ``=`` of a
3-hop query reads "next token: 3 hops". A text model's tokens have none.

A task's answers are also known from its text, so each generated answer token is marked
right or wrong, with the expected answer beside it.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kernels import difficulty


def token_reasons(*, task: str, tokens: Sequence[Mapping]) -> list[str]:
    """Per token event (in position order), the difficulty of the token it wrote next, as
    words, or "" when that token has none."""
    ends, text = [], ""
    for token in tokens:
        text += token["text"]
        ends.append(len(text))
    levels = difficulty.answer_levels(task, text)
    return [
        f"next token: {difficulty.label(task, levels[at])}" if at in levels else "" for at in ends
    ]


@dataclass(frozen=True)
class AnswerMark:
    right: bool
    expected: str

    @property
    def symbol(self) -> str:
        return "✓" if self.right else "✗"

    @property
    def title(self) -> str:
        return f"answer {self.symbol}: expected {self.expected!r}"

    def to_dict(self) -> dict[str, object]:
        return {"right": self.right, "expected": self.expected, "title": self.title}


def answer_marks(*, task: str, tokens: Sequence[Mapping]) -> list[AnswerMark | None]:
    """Per token event, whether a generated token writes its task's answer (None for the
    prompt, for tokens outside an answer, and for a text model)."""
    starts, text = [], ""
    for token in tokens:
        starts.append(len(text))
        text += token["text"]
    expected = difficulty.expected_answers(task, text)
    marks: list[AnswerMark | None] = []
    for start, token in zip(starts, tokens, strict=True):
        wanted = "".join(expected.get(start + i, "") for i in range(len(token["text"])))
        if token["phase"] != "generated" or not wanted:
            marks.append(None)
        else:
            marks.append(AnswerMark(token["text"].startswith(wanted), wanted))
    return marks
