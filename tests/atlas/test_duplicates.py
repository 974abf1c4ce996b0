"""The duplicate check on the atlas's own titles: no two of its works collide, and the
near-duplicates a proposer would type are caught."""

import itertools

import pytest
import yaml

from atlas.datafile import DEFAULT_PATH
from atlas.duplicates import NEAR_TITLE_RATIO, Candidate, matches, title_key, title_similarity

TITLES = [row["title"] for row in yaml.safe_load(DEFAULT_PATH.read_text())["works"]]


def _work(title: str, arxiv_id: str = "") -> Candidate:
    return Candidate("work", "w", title, arxiv_id, "/works/w/")


def test_no_two_works_of_the_atlas_are_taken_for_one() -> None:
    closest = max(
        title_similarity(title_key(a), title_key(b)) for a, b in itertools.combinations(TITLES, 2)
    )
    assert closest < NEAR_TITLE_RATIO


@pytest.mark.parametrize(
    ("proposed", "existing"),
    [
        ("Looped diffusion language model", "Looped Diffusion Language Models"),
        (
            "Scaling Latent Reasoning via Looped Language Model",
            "Scaling Latent Reasoning via Looped Language Models",
        ),
        (
            "Mixture of Recursions: Learning Dynamic Recursive Depth for Adaptive Token-level "
            "Computation",
            "Mixture-of-Recursions: Learning Dynamic Recursive Depths for Adaptive "
            "Token-Level Computation",
        ),
        (
            "Deja View: Looping Transformers for Multi View 3D Reconstruction",
            "Déjà View: Looping Transformers for Multi-View 3D Reconstruction",
        ),
        ("Universal Transformer", "Universal Transformers"),
    ],
)
def test_near_identical_titles_match(proposed: str, existing: str) -> None:
    assert existing in TITLES
    assert [
        m.candidate.title
        for m in matches(title=proposed, arxiv_id="", candidates=[_work(existing)])
    ] == [existing]


@pytest.mark.parametrize(
    ("proposed", "existing"),
    [
        (
            "Towards Looped Models Done Right, Part II: Topology, Input Injection",
            "Towards Looped Models Done Right, Part I: Topology, Input Injection",
        ),
        ("Looped Transformers 2", "Looped Transformers 3"),
        ("Looped Uniform Diffusion Language Models", "Looped Diffusion Language Models"),
    ],
)
def test_titles_differing_in_a_number_or_a_word_do_not(proposed: str, existing: str) -> None:
    assert matches(title=proposed, arxiv_id="", candidates=[_work(existing)]) == []


def test_the_same_arxiv_id_matches_whatever_the_version_and_title() -> None:
    found = matches(
        title="Anything", arxiv_id="2406.01234v2", candidates=[_work("Other", "2406.01234")]
    )
    assert [m.reason for m in found] == ["same arXiv id 2406.01234"]


def test_a_dropped_subtitle_is_shown_to_a_curator_but_not_refused() -> None:
    work = _work("Mixture-of-Recursions: Learning Dynamic Recursive Depths")
    refused = matches(title="Mixture-of-Recursions", arxiv_id="", candidates=[work])
    shown = matches(title="Mixture of Recursions", arxiv_id="", candidates=[work], main_titles=True)
    assert refused == [] and [m.reason for m in shown] == ["same title before the colon"]
