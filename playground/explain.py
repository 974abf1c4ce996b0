"""Why a run's positions took the loops they took, for the run view.

A task model's answer tokens each have a difficulty that the text states (the carry chain
into a sum digit's column, the hops a query asks for: :mod:`kernels.difficulty`). A
position's exit loop is the depth at which it wrote the *next* token, so the run view
shows the difficulty of the next token beside each position's exit loop: the ``=`` of a
3-hop query reads "next token: 3 hops". A text model's tokens have none.
"""

from collections.abc import Mapping, Sequence

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
