"""Branching a run at a token: the prompt of a sibling that takes another token there.

The token at generated position ``p`` was drawn from the prediction of position ``p − 1``
at its exit loop (an event's loops predict the *next* token), so the alternatives offered
are that event's stored top-k at its exit loop. A branch's prompt is the run's tokens
before ``p`` plus the chosen token, as text the worker will encode back into exactly those
ids: the run's own prompt text, then the decoded rest. A choice whose text would encode
into other ids (a byte in the middle of a character, a merge the tokenizer would undo) is
refused: the sibling would not read what was chosen.

A branch is stored in the sibling's ``params`` under ``BRANCH_OF`` (the run, the position
and the chosen token): the compare view compares a branch with its run although its
prompt text is longer (``branch_root_prompt``) and marks the branch point (``branch_found``).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from playground.checkpoints import ModelInfo, prompt_encode, tokens_decode

BRANCH_OF = "branch_of"  # Run.params key of a branch: {"run", "position", "token_id"}


class BranchError(ValueError):
    """A branch that cannot be made; the message names the field and the problem."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Branch:
    prompt: str
    position: int
    token_id: int

    def params(self, run_id: str) -> dict[str, Any]:
        return {"run": run_id, "position": self.position, "token_id": self.token_id}


def branch_choices(tokens: Sequence[Mapping[str, Any]], position: int) -> list[list[Any]]:
    """The ``[token_id, text, p]`` the token at ``position`` was drawn from: the top-k of
    the previous position's exit loop (empty where none is stored)."""
    previous = next((event for event in tokens if event["position"] == position - 1), None)
    if previous is None:
        return []
    row = next((r for r in previous["loops"] if r["loop"] == previous["exit_loop"]), None)
    return [list(entry) for entry in row["top"]] if row else []


def branch_make(
    *,
    prompt: str,
    model: ModelInfo,
    tokens: Sequence[Mapping[str, Any]],
    position: int,
    token_id: int,
) -> Branch:
    """The branch of a run (its ``prompt`` text and stored token events) that puts
    ``token_id`` at generated ``position``; ``BranchError`` names what is wrong."""
    by_position = {event["position"]: event for event in tokens}
    generated = sorted(p for p, event in by_position.items() if event["phase"] == "generated")
    here = by_position.get(position)
    if here is None or here.get("phase") != "generated":
        span = f"{generated[0]}–{generated[-1]}" if generated else "none yet"
        raise BranchError("position", f"must be a generated position of this run ({span})")
    if token_id == here["token_id"]:
        raise BranchError("token_id", "is the token the run generated there; choose another")
    ids = [by_position[p]["token_id"] for p in range(position)] + [token_id]
    prompt_ids = [event["token_id"] for event in tokens if event["phase"] == "prompt"]
    try:
        head, full = (tokens_decode(model=model, ids=part) for part in (prompt_ids, ids))
    except ValueError as exc:
        raise BranchError("token_id", f"is not a token of the model: {exc}") from None
    text = prompt + full[len(head) :] if full.startswith(head) else full
    if prompt_encode(model=model, text=text) != ids:
        raise BranchError(
            "token_id",
            "would not be read back as chosen: the text up to it encodes into other tokens "
            "(it splits a character, or the tokenizer merges it with its neighbours)",
        )
    return Branch(text, position, token_id)


def branch_root_prompt(run: Any, runs: Sequence[Any]) -> str:
    """The prompt of the run that ``run`` branched from, through branches of branches, as
    far as ``runs`` go (its own prompt when it is no branch of one of them): runs of one
    root prompt compare position by position."""
    by_id = {str(item.id): item for item in runs}
    seen = {str(run.id)}
    while (parent := by_id.get((run.params.get(BRANCH_OF) or {}).get("run", ""))) is not None:
        if str(parent.id) in seen:
            break
        seen.add(str(parent.id))
        run = parent
    return run.prompt


def branch_found(views: Sequence[Any]) -> dict[str, Any] | None:
    """The first of ``views`` (``pages.RunView``) that branched from another of them: its
    index (``label``) and its parent's (``parent``), the position, and the texts of the
    chosen and the replaced token (None until stored)."""
    ids = [view.id for view in views]
    for i, view in enumerate(views):
        branch = view.run.params.get(BRANCH_OF) or {}
        if branch.get("run") not in ids:
            continue
        parent = ids.index(branch["run"])
        return {
            "label": i,
            "parent": parent,
            "position": branch["position"],
            "chosen": _text_at(view.tokens, branch["position"]),
            "replaced": _text_at(views[parent].tokens, branch["position"]),
        }
    return None


def _text_at(tokens: Sequence[Mapping[str, Any]], position: int) -> str | None:
    return next((event["text"] for event in tokens if event["position"] == position), None)
