"""The shipped model: it loads, generates deterministically, and its card's numbers reproduce."""

import json
from pathlib import Path

import pytest
import torch

from kernels.checkpoint import load_checkpoint
from kernels.generate import generate_stream
from kernels.offline.card import exits_inline, render_card
from kernels.offline.evaluate import CHECK, evaluate, heldout_ids
from kernels.request import GenerationParams

SHIPPED = Path(__file__).resolve().parents[2] / "kernels" / "models" / "pydoc-loop"


@pytest.fixture(scope="module")
def one_thread():
    """The evaluation's thread count, so float reductions run in the same order."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def shipped(one_thread):
    return load_checkpoint(SHIPPED, device="cpu")


@pytest.fixture(scope="module")
def evaluation() -> dict:
    return json.loads((SHIPPED / "evaluation.json").read_text())


def test_shipped_directory_is_an_ouro_checkpoint():
    config = json.loads((SHIPPED / "config.json").read_text())

    assert config["model_type"] == "ouro" and config["total_ut_steps"] == 4
    assert (SHIPPED / "model.safetensors").stat().st_size <= 30 * 2**20
    assert (SHIPPED / "tokenizer.json").is_file() and (SHIPPED / "README.md").is_file()


def test_sampled_generation_is_deterministic_for_a_seed(shipped):
    params = GenerationParams(q=0.7, max_new_tokens=16, temperature=0.8, seed=7, top_k=0)

    def run():
        return [(e.token_id, e.exit_loop) for e in generate_stream(shipped, "import os\n", params)]

    first, second = run(), run()
    other_seed = [
        e.token_id
        for e in generate_stream(
            shipped, "import os\n", GenerationParams(**{**vars(params), "seed": 8})
        )
    ]

    assert first == second
    assert [t for t, _ in first] != other_seed


def test_greedy_generation_matches_the_card(shipped, evaluation):
    expected = evaluation["generations"][0]

    events = list(
        generate_stream(
            shipped, expected["prompt"], GenerationParams(q=0.7, max_new_tokens=40, top_k=0)
        )
    )

    assert [[e.text, e.exit_loop, e.phase[0]] for e in events] == expected["tokens"]
    assert len({e.exit_loop for e in events}) >= 2  # exits vary along one generation


def test_card_numbers_reproduce(shipped, evaluation):
    # given the held-out split of the corpus the model was trained on
    try:
        ids, digest = heldout_ids(SHIPPED, shipped)
    except RuntimeError as error:  # another Python version: another standard library
        pytest.skip(str(error))

    # when a small part of the evaluation is recomputed
    check = evaluate(shipped, ids, **CHECK)

    # then
    stored = evaluation["check"]
    assert digest == evaluation["heldout_sha256"]
    assert check["loss_per_loop"] == pytest.approx(stored["loss_per_loop"], rel=1e-3)
    for key in ("loss", "avg_exit", "sequences_with_3plus_depths"):
        assert check["q"]["0.7"][key] == pytest.approx(stored["q"]["0.7"][key], abs=0.02)
    training = json.loads((SHIPPED / "training.json").read_text())
    assert (SHIPPED / "README.md").read_text() == render_card(training, evaluation, SHIPPED.name)


def test_exits_inline_marks_each_token_with_its_loop():
    tokens = [["def", 1, "p"], [" add", 3, "g"], ["\n\n    ", 2, "g"], ["x", 4, "g"]]

    assert exits_inline(tokens) == "def¹ add³↵↵²\n    x⁴"
