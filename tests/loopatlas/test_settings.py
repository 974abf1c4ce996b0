"""The settings module refuses unsafe production configurations."""

import os
import subprocess
import sys

import pytest


def _import_settings(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY"}}
    return subprocess.run(
        [sys.executable, "-c", "import loopatlas.settings.base as s; print(s.SECURE_SSL_REDIRECT)"],
        env=clean | env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_secret_key_is_required_when_debug_is_off() -> None:
    # when
    result = _import_settings({"DEBUG": "0"})
    # then
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_production_defaults_are_secure() -> None:
    # when
    result = _import_settings({"DEBUG": "0", "SECRET_KEY": "x" * 50})
    # then
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


@pytest.mark.parametrize("raw", ["maybe", "2"])
def test_a_malformed_boolean_is_refused(raw: str) -> None:
    result = _import_settings({"DEBUG": raw})
    assert result.returncode != 0
    assert "is not a boolean" in result.stderr
