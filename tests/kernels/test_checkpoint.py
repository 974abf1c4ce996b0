import json
import shutil
import subprocess
import sys

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from kernels.checkpoint import ByteTokenizer, load_checkpoint, save_checkpoint


def test_fixture_loads_in_its_dtype_on_cpu(ouro_tiny):
    assert ouro_tiny.dtype == torch.float32
    assert ouro_tiny.device.type == "cpu"
    assert not ouro_tiny.model.training
    assert isinstance(ouro_tiny.tokenizer, ByteTokenizer)  # no tokenizer.json in ouro-tiny


def test_dtype_override_converts_the_weights(fixture_dir):
    loaded = load_checkpoint(fixture_dir, device="cpu", dtype=torch.bfloat16)

    assert loaded.dtype == torch.bfloat16
    assert loaded.config.dtype == "bfloat16"


def test_shipped_python_is_never_run(fixture_dir, tmp_path):
    # given a checkpoint whose auto_map points at code that would leave a trace
    ckpt = tmp_path / "ckpt"
    shutil.copytree(fixture_dir, ckpt)
    trace = tmp_path / "ran"
    for name in ("modeling_ouro.py", "configuration_ouro.py"):
        (ckpt / name).write_text(f"open({str(trace)!r}, 'w').write('ran')\n")

    # when
    load_checkpoint(ckpt, device="cpu")

    # then
    assert not trace.exists()


def test_save_then_load_round_trips(tiny_model, tiny_config, tmp_path):
    # when
    save_checkpoint(tiny_model, tiny_config, tmp_path / "out")
    loaded = load_checkpoint(tmp_path / "out", device="cpu")

    # then
    raw = json.loads((tmp_path / "out" / "config.json").read_text())
    assert raw["model_type"] == "ouro" and raw["dtype"] == "float32"
    ids = torch.randint(1, 99, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(ids).step_logits, tiny_model(ids).step_logits)


def test_torch_dtype_key_of_older_checkpoints_is_honoured(tiny_model, tiny_config, tmp_path):
    path = save_checkpoint(tiny_model.to(torch.bfloat16), tiny_config, tmp_path / "bf16")
    raw = json.loads((path / "config.json").read_text())
    raw["torch_dtype"] = raw.pop("dtype")
    (path / "config.json").write_text(json.dumps(raw))

    assert load_checkpoint(path, device="cpu").dtype == torch.bfloat16


def test_a_checkpoint_with_other_tensor_names_is_refused(tiny_model, tiny_config, tmp_path):
    from safetensors.torch import load_file, save_file

    path = save_checkpoint(tiny_model, tiny_config, tmp_path / "bad")
    state = load_file(str(path / "model.safetensors"))
    state["model.norm.scale"] = state.pop("model.norm.weight")
    save_file(state, str(path / "model.safetensors"))

    with pytest.raises(ValueError, match="missing.*model.norm.weight"):
        load_checkpoint(path, device="cpu")


def test_a_directory_without_config_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_checkpoint(tmp_path, device="cpu")


def test_tokenizer_json_gives_a_transformers_fast_tokenizer(tiny_model, tiny_config, tmp_path):
    # given a small BPE trained here, saved with the checkpoint
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(
        ["def loop(x): return x", "for t in range(4): pass"] * 10,
        trainers.BpeTrainer(vocab_size=99, special_tokens=["<|endoftext|>", "<unk>"]),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>")
    path = save_checkpoint(tiny_model, tiny_config, tmp_path / "tok", tokenizer=tokenizer)

    # when
    loaded = load_checkpoint(path, device="cpu")

    # then
    assert isinstance(loaded.tokenizer, PreTrainedTokenizerFast)
    ids = loaded.tokenizer.encode("def loop(x)", add_special_tokens=False)
    assert loaded.tokenizer.decode(ids) == "def loop(x)"
    assert loaded.tokenizer.eos_token_id == 0


def test_byte_fallback_round_trips_utf8_and_refuses_small_vocabularies():
    assert ByteTokenizer(256).decode(ByteTokenizer(256).encode("λ-loop")) == "λ-loop"
    assert ByteTokenizer(256).decode([0xCE]) == "\ufffd"
    with pytest.raises(ValueError, match="vocabulary of 256"):
        ByteTokenizer(99).encode("λ")


def test_kernels_never_imports_django():
    code = (
        "import sys, kernels.checkpoint, kernels.model, kernels.exits, kernels.hf, "
        "kernels.offline.check_reference; assert 'django' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
