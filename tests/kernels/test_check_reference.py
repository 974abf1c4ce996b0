import shutil

import torch
from safetensors.torch import load_file, save_file

from kernels.offline import check_reference


def test_the_fixture_passes(fixture_dir, capsys):
    # when
    code = check_reference.main([str(fixture_dir)])

    # then every golden tensor is listed and within tolerance
    out = capsys.readouterr().out
    assert code == 0
    for name in (
        "layer_outputs",
        "threshold_exit_steps",
        "gen_step_logits",
        "engine select threshold_logits",
        "engine best-available q=1 gen_output_ids",
    ):
        assert name in out
    assert "all within tolerance" in out


def test_a_perturbed_checkpoint_fails(fixture_dir, tmp_path, capsys):
    # given the fixture with one weight nudged by far more than the tolerance
    ckpt = tmp_path / "ckpt"
    shutil.copytree(fixture_dir, ckpt)
    state = load_file(str(ckpt / "model.safetensors"))
    state["model.layers.1.mlp.down_proj.weight"] += 1e-2 * torch.randn_like(
        state["model.layers.1.mlp.down_proj.weight"]
    )
    save_file(state, str(ckpt / "model.safetensors"))

    # when
    code = check_reference.main([str(ckpt)])

    # then
    assert code == 1
    assert "FAILED: layer_outputs" in capsys.readouterr().out
