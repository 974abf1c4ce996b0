"""`make run` is the embedded mode's one command: it must start the worker too."""

import re
from pathlib import Path

from django.conf import settings

MAKEFILE = (Path(settings.BASE_DIR) / "Makefile").read_text()


def recipe(target: str) -> str:
    match = re.search(rf"^{target}:.*\n((?:\t.*\n?)+)", MAKEFILE, re.MULTILINE)
    assert match, f"no {target} target"
    return match.group(1).replace("\\\n", " ")


def test_make_run_starts_a_worker_on_the_gpu_queue_beside_the_web_server():
    # given
    run = recipe("run")

    # then
    assert re.search(r"-m celery -A workers worker -Q gpu --pool threads", run)
    assert "--concurrency $${PLAYGROUND_BATCH:-8}" in run  # one task thread per batch row
    assert "-m uvicorn loopatlas.asgi:application" in run
    assert "--no-proxy-headers" in run  # the client address is NUM_PROXIES's to find
    assert run.index("celery") < run.index("uvicorn")  # in the background, before it
    assert "trap 'kill $$worker" in run  # and stopped with it


def test_make_run_migrates_before_serving():
    # given
    run = recipe("run")

    # then
    assert run.index("manage.py migrate") < run.index("celery")
