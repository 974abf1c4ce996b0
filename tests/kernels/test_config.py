import json

import pytest
import torch

from kernels.config import PRESETS, LoopConfig, preset


def test_fixture_config_parses_with_derived_fields(fixture_dir):
    # given the fixture's config.json (written by the reference config class)
    raw = json.loads((fixture_dir / "config.json").read_text())

    # when
    config = LoopConfig.from_dict(raw)

    # then
    assert (config.hidden_size, config.num_hidden_layers, config.total_ut_steps) == (64, 2, 4)
    assert config.num_kv_groups == 2
    assert config.kv_dim == 32
    assert config.torch_dtype == torch.float32


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"])
def test_either_dtype_key_is_accepted(key):
    config = LoopConfig.from_dict({"model_type": "ouro", key: "bfloat16"})

    assert config.torch_dtype == torch.bfloat16


def test_head_dim_and_kv_heads_default_from_hidden_and_heads():
    config = LoopConfig.from_dict(
        {"hidden_size": 48, "num_attention_heads": 6, "num_key_value_heads": None}
    )

    assert config.head_dim == 8
    assert config.num_key_value_heads == 6


def test_rope_theta_is_read_from_transformers5_rope_parameters():
    config = LoopConfig.from_dict({"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}})

    assert config.rope_theta == 5e5


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"model_type": "llama"}, "not an Ouro config"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope scaling"),
        ({"use_sliding_window": True, "sliding_window": 128}, "sliding-window"),
        ({"hidden_act": "gelu"}, "silu"),
        ({"num_attention_heads": 4, "num_key_value_heads": 3}, "multiple"),
        ({"dtype": "int8"}, "unsupported dtype"),
    ],
)
def test_what_the_engine_does_not_implement_is_refused(raw, message):
    with pytest.raises(ValueError, match=message):
        LoopConfig.from_dict(raw)


def test_to_dict_round_trips_and_names_the_model_type():
    config = preset("bench-512")

    raw = config.to_dict()

    assert raw["model_type"] == "ouro"
    assert "auto_map" not in raw
    assert LoopConfig.from_dict(raw) == config


def test_presets_are_independent_copies():
    config = preset("ouro-tiny")
    config.total_ut_steps = 9

    assert PRESETS["ouro-tiny"].total_ut_steps == 4
    with pytest.raises(ValueError, match="unknown preset"):
        preset("nope")


def test_ouro_2_6b_is_ouro_1_4b_with_48_layers():
    small, large = preset("ouro-1.4b"), preset("ouro-2.6b")

    assert (small.num_hidden_layers, large.num_hidden_layers) == (24, 48)
    assert large.replace(num_hidden_layers=24) == small
