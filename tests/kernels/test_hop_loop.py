"""The shipped pointer-chasing model: an Ouro checkpoint whose card's numbers reproduce."""

import json
from pathlib import Path

import pytest
import torch

from kernels.checkpoint import load_checkpoint
from kernels.generate import generate_stream
from kernels.offline import hops
from kernels.offline.card import render_card
from kernels.offline.evaluate import TASK_CHECK, model_defaults
from kernels.offline.evaluate_task import evaluate_task
from kernels.request import GenerationParams

SHIPPED = Path(__file__).resolve().parents[2] / "kernels" / "models" / "hop-loop"


@pytest.fixture(scope="module")
def shipped():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_checkpoint(SHIPPED, device="cpu")
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def evaluation() -> dict:
    return json.loads((SHIPPED / "evaluation.json").read_text())


def test_shipped_directory_is_a_small_byte_level_ouro_checkpoint():
    config = json.loads((SHIPPED / "config.json").read_text())

    assert config["model_type"] == "ouro" and config["eos_token_id"] == hops.EOS
    assert (SHIPPED / "model.safetensors").stat().st_size <= 20 * 2**20
    assert not (SHIPPED / "tokenizer.json").exists()  # UTF-8 bytes


def test_it_chases_pointers_at_its_default_q(shipped):
    q = model_defaults(SHIPPED)["q"]
    # a -> c -> d -> b -> ... : three hops from a reach b, one from d reaches b
    problem = hops.Problem(("hg", "ac", "ef", "cd", "ga", "db", "fh", "be"), (("a", 3),))

    events = list(generate_stream(shipped, problem.prompt, GenerationParams(q=q, top_k=0)))
    text = "".join(e.text for e in events if e.phase == "generated")

    assert hops.check(problem, [text]) and text == "b\n"


def test_card_numbers_reproduce(shipped, evaluation):
    settings = json.loads((SHIPPED / "training.json").read_text())["settings"]

    check = evaluate_task(shipped, settings, q=evaluation["default_q"], **TASK_CHECK)

    stored = evaluation["check"]
    for key in ("accuracy_fixed_depth", "accuracy_full_depth", "exit_by_level", "extrapolation"):
        assert check[key] == stored[key], key
    training = json.loads((SHIPPED / "training.json").read_text())
    assert (SHIPPED / "README.md").read_text() == render_card(training, evaluation, SHIPPED.name)
