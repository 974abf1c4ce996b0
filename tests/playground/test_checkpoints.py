import json
import shutil
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from loopatlas.settings.base import _playground_models
from playground.checkpoints import (
    default_model_name,
    model_catalog,
    model_get,
    prompt_token_count,
)
from tests.playground.conftest import TINY


def test_the_catalog_describes_each_configured_model_without_loading_it(settings, tmp_path):
    # given
    settings.PLAYGROUND_MODELS = {"tiny": TINY, "gone": tmp_path / "nowhere"}

    # when
    tiny, gone = model_catalog()

    # then
    assert (tiny.name, tiny.available, tiny.loops, tiny.max_loops) == ("tiny", True, 4, 8)
    assert tiny.max_positions == 512
    assert not gone.available and "missing" in gone.problem
    assert default_model_name() == "tiny"
    assert model_get(name="other") is None


def test_an_unreadable_config_makes_the_model_unavailable(settings, tmp_path):
    # given
    (tmp_path / "config.json").write_text("{not json")
    settings.PLAYGROUND_MODELS = {"broken": tmp_path}

    # when
    info = model_get(name="broken")

    # then
    assert info is not None
    assert not info.available and "not a usable config" in info.problem


def test_prompt_tokens_are_counted_as_the_worker_encodes_them():
    # given: the fixture has no tokenizer.json, so the worker uses UTF-8 bytes
    info = model_get(name="ouro-tiny")
    assert info is not None

    # then
    assert prompt_token_count(model=info, text="héllo") == 6


def test_the_models_setting_takes_name_path_pairs_after_the_shipped_models():
    # when
    models = _playground_models("mine=/models/mine, other = ~/other")

    # then
    assert list(models) == ["pydoc-loop", "hop-loop", "mine", "other"]
    assert models["mine"] == Path("/models/mine")
    assert models["other"] == Path("~/other").expanduser()


def test_a_malformed_models_setting_is_refused():
    with pytest.raises(ImproperlyConfigured, match="name=path"):
        _playground_models("just-a-name")


def test_a_model_directory_offers_its_summary_and_example_prompts(settings, tmp_path):
    # given a copy of the fixture with a playground.json, and one with a broken one
    shutil.copytree(TINY, tmp_path / "good")
    (tmp_path / "good" / "playground.json").write_text(
        json.dumps(
            {
                "summary": "Adds numbers.",
                "examples": ["12+34=", "99+01="],
                "defaults": {"q": 0.5, "decoding": "sample", "loops": 99},
                "task": "addition",
            }
        )
    )
    shutil.copytree(TINY, tmp_path / "bad")
    (tmp_path / "bad" / "playground.json").write_text("{not json")
    settings.PLAYGROUND_MODELS = {"good": tmp_path / "good", "bad": tmp_path / "bad"}

    # when
    good, bad = model_get(name="good"), model_get(name="bad")

    # then: the summary shows; a broken file costs the notes only, never the model
    assert good is not None and bad is not None
    assert good.summary == "Adds numbers." and good.examples == ("12+34=", "99+01=")
    assert dict(good.defaults) == {"q": 0.5, "decoding": "sample"}  # only defaultable ones
    assert good.task == "addition"
    assert bad.available and bad.summary == "" and bad.examples == () and bad.defaults == ()
    assert bad.task == "text"


def test_the_form_starts_from_the_default_models_settings(settings, tmp_path):
    from playground.forms import RunForm

    shutil.copytree(TINY, tmp_path / "text")
    (tmp_path / "text" / "playground.json").write_text(
        json.dumps({"defaults": {"decoding": "sample", "seed": 3}})
    )
    settings.PLAYGROUND_MODELS = {"text": tmp_path / "text", "tiny": TINY}

    form = RunForm()

    assert form["decoding"].initial == "sample" and form["seed"].initial == 3
    assert "&quot;decoding&quot;: &quot;sample&quot;" in str(form["model"])  # data-defaults
