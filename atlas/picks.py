"""The visitor's Compare selection, kept in the session so it survives paging and filters."""

from dataclasses import dataclass

from django.contrib.sessions.backends.base import SessionBase

from atlas.selectors import COMPARE_MAX

SESSION_KEY = "atlas_compare"


def picks_get(session: SessionBase) -> list[str]:
    return list(session.get(SESSION_KEY, []))


@dataclass(frozen=True)
class PickResult:
    picks: list[str]
    refused: bool


def picks_set(session: SessionBase, *, slug: str, picked: bool) -> PickResult:
    """Tick or untick one work; a tick beyond ``COMPARE_MAX`` is refused."""
    picks = picks_get(session)
    if picked and slug not in picks:
        if len(picks) >= COMPARE_MAX:
            return PickResult(picks=picks, refused=True)
        picks.append(slug)
    elif not picked and slug in picks:
        picks.remove(slug)
    session[SESSION_KEY] = picks
    return PickResult(picks=picks, refused=False)
