"""The engine on a CUDA device: what the CPU tests prove, proved there (skipped without
one; ``benchmarks/device.sh`` runs these)."""

import pytest
import torch

from kernels.batch import ContinuousBatch
from kernels.checkpoint import load_checkpoint
from kernels.engine import Engine
from kernels.offline.host_reads import count_host_reads
from kernels.request import GenerationParams
from kernels.rules import ACT, POLICIES, Convergence, Fixed, Ponder, QExit
from kernels.runner import StepRunner
from tests.kernels.naive import naive_generate
from tests.kernels.test_runner import PROMPTS, SETTINGS, assert_rows_equal, run

pytestmark = pytest.mark.gpu
# bf16 against fp32 on the same device: logits of the ouro-tiny fixture (|logit| < 10)
# move by about 2**-8 relative per rounding; exits may flip near a threshold, so only the
# full-depth logits are compared
BF16_ATOL = 0.15


@pytest.fixture(scope="module")
def on_gpu(fixture_dir):
    return load_checkpoint(fixture_dir, device="cuda")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("rule", [QExit(0.6), Convergence(1e-2), Fixed(2), Ponder(), ACT(0.3)])
def test_the_engine_equals_the_naive_reference_on_the_device(on_gpu, policy, rule):
    prompt = list(on_gpu.tokenizer.encode(PROMPTS[0]))
    engine = Engine(on_gpu.model, rule, policy)
    prefill = engine.prefill([prompt], reserve=5)
    records = list(engine.decode(prefill, max_new_tokens=5))

    ids, naive = naive_generate(on_gpu.model, rule, policy, prompt, 5, n_loops=4)

    assert [r.token_id for r in records] == ids[len(prompt) :]
    exits = prefill.exit_loop[0].tolist() + [r.exit_loop for r in records]
    assert exits == [t.exit_loop for t in naive]
    want = torch.stack([t.logits for t in naive[: len(prompt)]])
    torch.testing.assert_close(prefill.logits[0], want, atol=1e-5, rtol=0)


def test_rows_of_any_settings_batched_equal_each_alone_on_the_device(on_gpu):
    prompts = [list(on_gpu.tokenizer.encode(p)) for p in PROMPTS]
    runner = StepRunner(on_gpu.model, loops=6, top_k=5, trace=True)

    prompt_rows, generated = run(runner, prompts, SETTINGS, 3)

    for r, (p, s) in enumerate(zip(prompts, SETTINGS, strict=True)):
        rows, gen = run(runner, [p], [s], 3)
        assert_rows_equal((prompt_rows[r], generated[r]), (rows[0], gen[0]))


def test_bfloat16_full_depth_is_within_its_tolerance_of_float32(fixture_dir, on_gpu):
    half = load_checkpoint(fixture_dir, device="cuda", dtype=torch.bfloat16)
    prompt = list(on_gpu.tokenizer.encode(PROMPTS[1]))

    full = Engine(on_gpu.model).prefill([prompt]).logits
    low = Engine(half.model).prefill([prompt]).logits

    torch.testing.assert_close(low.float(), full, atol=BF16_ATOL, rtol=0)


def test_a_decode_step_reads_the_device_a_bounded_number_of_times(on_gpu):
    batch = ContinuousBatch(on_gpu, max_rows=4)
    for key, prompt in enumerate(PROMPTS[:4]):
        batch.add(key, prompt, GenerationParams(max_new_tokens=4, q=0.6, top_k=0))
    counts = []
    while batch.busy:
        for _ in batch.joins():
            pass
        with count_host_reads() as reads:
            batch.decode()
        counts.append(len(reads))

    assert min(counts) == 1  # a step in which no token stopped: the stops alone
