"""Shared fixtures for the kernels tests: the golden ouro-tiny checkpoint and tiny models.

Nothing here or in these tests needs more than torch, safetensors and pytest, so a GPU
machine runs them alone (``benchmarks/device.sh``: ``--confcutdir tests/kernels``)."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from kernels.checkpoint import LoadedModel, load_checkpoint
from kernels.config import LoopConfig, preset
from kernels.model import LoopedLM

FIXTURE = Path(__file__).parent / "fixtures" / "ouro-tiny"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` skip without a CUDA device."""
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    return FIXTURE


@pytest.fixture(scope="session")
def reference() -> dict[str, torch.Tensor]:
    """The golden tensors computed by the official implementation (see the fixture README)."""
    return load_file(str(FIXTURE / "reference.safetensors"))


@pytest.fixture(scope="session")
def ouro_tiny() -> LoadedModel:
    return load_checkpoint(FIXTURE, device="cpu")


@pytest.fixture
def tiny_config() -> LoopConfig:
    """HF ModelTester-style shape: d_model 32, 2 layers, 2 loops, GQA 4/2, vocab 99."""
    return preset("test-32")


@pytest.fixture
def tiny_model(tiny_config: LoopConfig) -> LoopedLM:
    torch.manual_seed(0)
    return LoopedLM(tiny_config).eval()
