"""The workers' tests use the playground's run fixtures."""

from tests.playground.conftest import run_factory  # noqa: F401
