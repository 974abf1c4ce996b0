import torch
from transformers import AutoConfig, AutoModelForCausalLM

import kernels.hf  # noqa: F401  (registers model_type "ouro")
from kernels.checkpoint import save_checkpoint
from kernels.hf import OuroConfig, OuroForCausalLM


def test_auto_classes_load_the_fixture_despite_its_auto_map(fixture_dir, reference):
    # given config.json still has an auto_map to .py files that are not there
    config = AutoConfig.from_pretrained(fixture_dir)
    model = AutoModelForCausalLM.from_pretrained(fixture_dir)

    # then our classes were used, and they compute the reference's default output
    assert isinstance(config, OuroConfig) and isinstance(model, OuroForCausalLM)
    with torch.no_grad():
        logits = model(reference["input_ids"], reference["attention_mask"]).logits
    torch.testing.assert_close(logits, reference["logits_default"], atol=1e-5, rtol=0)


def test_exit_threshold_selects_the_reference_logits(fixture_dir, reference):
    model = AutoModelForCausalLM.from_pretrained(fixture_dir)

    with torch.no_grad():
        for i, threshold in enumerate(reference["thresholds"].tolist()):
            logits = model(reference["input_ids"], exit_threshold=threshold).logits
            torch.testing.assert_close(logits, reference["threshold_logits"][i], atol=1e-5, rtol=0)


def test_generate_reproduces_the_reference_greedy_ids(fixture_dir, reference):
    model = AutoModelForCausalLM.from_pretrained(fixture_dir)
    assert isinstance(model, OuroForCausalLM)  # the Auto class resolved model_type "ouro"
    prompt = reference["gen_prompt_ids"]

    # transformers annotates generate()'s self with a Protocol its own models do not meet
    out = model.generate(  # type: ignore[misc]
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False
    )

    assert isinstance(out, torch.Tensor) and torch.equal(out, reference["gen_output_ids"])


def test_labels_give_the_weighted_exit_loss(fixture_dir, reference):
    model = AutoModelForCausalLM.from_pretrained(fixture_dir)
    ids = reference["input_ids"]

    with torch.no_grad():
        out = model(ids, labels=ids)

    torch.testing.assert_close(out.logits, reference["logits_weighted"], atol=1e-5, rtol=0)
    expected = torch.nn.functional.cross_entropy(
        reference["logits_weighted"][:, :-1].flatten(0, 1), ids[:, 1:].flatten()
    )
    torch.testing.assert_close(out.loss, expected, atol=1e-5, rtol=0)


def test_our_saved_checkpoints_load_through_the_auto_classes(tiny_model, tiny_config, tmp_path):
    path = save_checkpoint(tiny_model, tiny_config, tmp_path / "ckpt")
    ids = torch.randint(1, 99, (1, 6))

    model = AutoModelForCausalLM.from_pretrained(path)

    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, tiny_model(ids).step_logits[-1])
