import pytest
import torch

from kernels.model import LoopedLM

ATOL = 1e-5


@pytest.mark.parametrize("name", ["layer_outputs", "step_hidden", "step_logits", "gate_logits"])
def test_every_loop_matches_the_reference(ouro_tiny, reference, name):
    # when
    with torch.no_grad():
        out = ouro_tiny.model(
            reference["input_ids"], reference["attention_mask"], with_layer_outputs=True
        )

    # then
    torch.testing.assert_close(getattr(out, name), reference[name], atol=ATOL, rtol=0)


def test_shapes_on_a_tiny_config(tiny_model, tiny_config):
    ids = torch.randint(0, tiny_config.vocab_size, (3, 7))

    out = tiny_model(ids, with_layer_outputs=True)

    t, layers, h = tiny_config.total_ut_steps, tiny_config.num_hidden_layers, 32
    assert out.step_hidden.shape == (t, 3, 7, h)
    assert out.step_logits.shape == (t, 3, 7, tiny_config.vocab_size)
    assert out.gate_logits.shape == (t, 3, 7)
    assert out.layer_outputs.shape == (t, layers, 3, 7, h)


def test_more_loops_than_trained_extrapolate_and_extend_the_prefix(tiny_model):
    ids = torch.randint(1, 99, (1, 5))

    with torch.no_grad():
        two, four = tiny_model(ids), tiny_model(ids, loops=4)

    assert four.step_hidden.shape[0] == 4
    torch.testing.assert_close(four.step_hidden[:2], two.step_hidden)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_on_either_side_does_not_change_real_tokens(tiny_model, side):
    # given a short row padded to the length of a long one
    long, short = torch.randint(1, 99, (1, 9)), torch.randint(1, 99, (1, 5))
    pad = torch.zeros(1, 4, dtype=torch.long)
    padded = torch.cat([pad, short], 1) if side == "left" else torch.cat([short, pad], 1)
    batch = torch.cat([long, padded])
    mask = (torch.arange(9) >= 4) if side == "left" else (torch.arange(9) < 5)
    mask = torch.stack([torch.ones(9, dtype=torch.bool), mask]).long()

    # when
    with torch.no_grad():
        out = tiny_model(batch, mask)
        alone_long, alone_short = tiny_model(long), tiny_model(short)

    # then
    real = mask[1].bool()
    torch.testing.assert_close(
        out.step_logits[:, 0], alone_long.step_logits[:, 0], atol=1e-5, rtol=0
    )
    torch.testing.assert_close(
        out.step_logits[:, 1, real], alone_short.step_logits[:, 0], atol=1e-5, rtol=0
    )
    assert torch.isfinite(out.step_logits).all()


def test_the_reference_forward_trains_with_autograd(tiny_model, tiny_config):
    # given
    model = tiny_model.train()
    ids = torch.randint(1, tiny_config.vocab_size, (2, 6))

    # when: a loss on every loop's logits and on the gate
    out = model(ids)
    loss = (
        torch.nn.functional.cross_entropy(
            out.step_logits[:, :, :-1].flatten(0, 2),
            ids[:, 1:].repeat(out.step_logits.shape[0], 1).flatten(),
        )
        + out.gate_logits.sigmoid().mean()
    )
    loss.backward()

    # then every parameter gets a gradient
    missing = [
        n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0
    ]
    assert missing == []


def test_tied_embeddings_share_one_tensor(tiny_config):
    model = LoopedLM(tiny_config.replace(tie_word_embeddings=True))

    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_bfloat16_runs_and_stays_close_to_float32(ouro_tiny, reference):
    model16 = LoopedLM(ouro_tiny.config).to(torch.bfloat16)
    model16.load_state_dict(ouro_tiny.model.state_dict())

    with torch.no_grad():
        out = model16(reference["input_ids"])

    assert out.step_logits.dtype == torch.bfloat16
    # the fixture README: bf16 moves per-loop logits by up to ~0.03
    torch.testing.assert_close(out.step_logits.float(), reference["step_logits"], atol=0.1, rtol=0)
