"""Why a run's answer positions took the loops they took, for the run view.

A task model's answer tokens each have a difficulty that the text states (the carry chain
into a sum digit's column, the hops a query asks for: :mod:`kernels.difficulty`); the run
view shows it beside each token's exit loop, so a deep position explains itself. A text
model's tokens have none.
"""

from collections.abc import Mapping, Sequence

from kernels import difficulty


def token_reasons(*, task: str, tokens: Sequence[Mapping]) -> list[str]:
    """Per token event (in position order), its difficulty as words, or "" when none."""
    offsets, text = [], ""
    for token in tokens:
        offsets.append(len(text))
        text += token["text"]
    levels = difficulty.answer_levels(task, text)
    return [difficulty.label(task, levels[at]) if at in levels else "" for at in offsets]
