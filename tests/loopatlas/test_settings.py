"""The settings module refuses unsafe production configurations."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

# What a production host sets (a key that `check --deploy` finds strong enough).
PRODUCTION = {
    "DEBUG": "0",
    "SECRET_KEY": "k3y-" + "0123456789abcdefghijklmnopqrstuvwxyzABCDEF!@#%^&*(-_=+)",
    "ALLOWED_HOSTS": "atlas.example.org",
}


def _clean_environment() -> dict[str, str]:
    """This process's environment without the variables the settings read."""
    names = {"DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DJANGO_SETTINGS_MODULE"}
    return {
        k: v
        for k, v in os.environ.items()
        if k not in names and not k.startswith(("SECURE_", "SESSION_", "CSRF_", "BEHIND_"))
    }


def _import_settings(
    env: dict[str, str], expression: str = "s.SECURE_SSL_REDIRECT"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", f"import loopatlas.settings.base as s; print({expression})"],
        env=_clean_environment() | env,
        capture_output=True,
        text=True,
        check=False,
    )


def check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``manage.py check --deploy`` under the base settings and ``env``; warnings fail."""
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=_clean_environment() | env,
        cwd=settings.BASE_DIR,
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


def test_check_deploy_is_clean_under_the_production_defaults(tmp_path: Path) -> None:
    result = check_deploy(PRODUCTION | {"LOOPATLAS_VAR_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize(
    ("env", "seconds"),
    [
        ({}, "31536000"),  # TLS on by default: a year
        ({"SECURE_SSL_REDIRECT": "0"}, "0"),  # no TLS, no HSTS
        ({"SECURE_HSTS_SECONDS": "600"}, "600"),  # the operator's own
    ],
)
def test_hsts_defaults_to_a_year_once_tls_is_on(env: dict[str, str], seconds: str) -> None:
    result = _import_settings(PRODUCTION | env, "s.SECURE_HSTS_SECONDS")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == seconds


@pytest.mark.parametrize(("env", "header"), [({}, "None"), ({"BEHIND_TLS_PROXY": "1"}, "https")])
def test_only_a_declared_tls_proxy_may_say_the_request_was_https(
    env: dict[str, str], header: str
) -> None:
    expression = "(getattr(s, 'SECURE_PROXY_SSL_HEADER', None) or (0, None))[1]"
    result = _import_settings(PRODUCTION | env, expression)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == header
