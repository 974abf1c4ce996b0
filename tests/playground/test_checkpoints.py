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


def test_the_models_setting_takes_name_path_pairs_after_the_shipped_model():
    # when
    models = _playground_models("mine=/models/mine, other = ~/other")

    # then
    assert list(models) == ["pydoc-loop", "mine", "other"]
    assert models["mine"] == Path("/models/mine")
    assert models["other"] == Path("~/other").expanduser()


def test_a_malformed_models_setting_is_refused():
    with pytest.raises(ImproperlyConfigured, match="name=path"):
        _playground_models("just-a-name")
