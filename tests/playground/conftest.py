"""Playground fixtures: runs in each state, and the tiny checkpoint's direct output."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.cache import cache
from django.db.backends.signals import connection_created

from playground import streams
from playground.models import Run, RunToken


def _read_uncommitted(sender, connection, **kwargs) -> None:
    """The suite's in-memory SQLite database is shared between threads in shared-cache
    mode, where a reader meeting a writer's table lock fails at once ("database table is
    locked") instead of waiting. The SSE tests read on pooled threads while a simulated
    worker writes, so readers here take no table locks (a file database, as deployed,
    waits on its busy timeout instead)."""
    if connection.vendor == "sqlite" and connection.is_in_memory_db():
        connection.connection.execute("PRAGMA read_uncommitted = 1")


connection_created.connect(_read_uncommitted)


@pytest.fixture(autouse=True)
def _fresh_cache():
    """The submit-rate counters live in the cache; every test starts with none."""
    cache.clear()
    yield
    cache.clear()


TINY = Path(settings.BASE_DIR) / "tests" / "kernels" / "fixtures" / "ouro-tiny"
PROMPT = "def add(a, b):"


def make_event(position: int, phase: str = "generated", loops: int = 4, exit_loop: int = 2):
    """A TokenEvent dict shaped like ``kernels.report.TokenEvent.to_dict()``."""
    cumulative = [min(1.0, 0.3 * (t + 1)) for t in range(exit_loop)]
    return {
        "position": position,
        "phase": phase,
        "token_id": 97 + position % 26,
        "text": chr(97 + position % 26),
        "exit_loop": exit_loop,
        "loops_computed": exit_loop,
        "loops": [
            {
                "loop": t + 1,
                "gate_lambda": 0.3,
                "exit_p": 0.3,
                "cumulative": cumulative[t],
                "kl": None,
                "top": [[97, "a", 0.5]],
            }
            for t in range(exit_loop)
        ],
        "work": {"token_loops_executed": position + 1},
        "elapsed_s": 0.01 * position,
    }


@pytest.fixture
def run_factory(db) -> Callable[..., Run]:
    """Creates a run (queued by default) with ``tokens`` stored token records."""

    def make(tokens: int = 0, prompt_tokens: int = 0, **fields: Any) -> Run:
        values = {
            "prompt": PROMPT,
            "model": "ouro-tiny",
            "params": {"max_new_tokens": 8, "q": 0.7, "loops": None, "seed": 0},
            "trained_loops": 4,
        }
        run = Run.objects.create(**(values | fields))
        for position in range(tokens):
            phase = "prompt" if position < prompt_tokens else "generated"
            RunToken.from_event(run, make_event(position, phase)).save()
        return run

    return make


@pytest.fixture(scope="session")
def tiny_model():
    """The fixture checkpoint on the device a worker would pick (CUDA when present), so
    the reference and the worker compute alike."""
    from kernels.checkpoint import load_checkpoint

    return load_checkpoint(TINY)


@pytest.fixture(scope="session")
def direct_events(tiny_model) -> Callable[..., list[dict]]:
    """The engine's own events for a prompt and parameters (the reference for runs)."""
    from kernels.generate import generate_stream
    from kernels.request import GenerationParams

    def generate(prompt: str = PROMPT, **params: Any) -> list[dict]:
        params.pop("extrapolate", None)
        return [
            event.to_dict()
            for event in generate_stream(tiny_model, prompt, GenerationParams(**params))
        ]

    return generate


@pytest.fixture
def owner_session(client) -> dict[str, str]:
    """Gives ``client`` a page session that owns the runs made with the returned fields."""
    from playground.visitors import SESSION_SECRET, secret_hash, visitor_of_session

    session = client.session
    session[SESSION_SECRET] = "the-session-secret"
    session.save()
    return {
        "owner_hash": secret_hash("the-session-secret"),
        "visitor": visitor_of_session("the-session-secret"),
    }


@pytest.fixture
def stream(settings, redis_url):
    """The run streams on the real Redis (a database of its own, emptied first): its client."""
    settings.REDIS_URL = redis_url
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    streams.stream_reset_client()
    yield client
    streams.stream_reset_client()
