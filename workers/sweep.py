"""Each worker's sweep of runs that will not end by themselves.

A run whose worker died keeps its ``running`` status until someone fails it: a daemon
thread of every worker process calls ``services.run_fail_stale`` every
``PLAYGROUND_STALE_SWEEP_S`` seconds, so such a run (and a queued one no worker took) is
failed with its reason within about ``PLAYGROUND_STALE_AFTER_S`` plus that interval, with
no viewer, submit or worker start needed. A thread rather than Celery beat: it runs in the
embedded ``make run`` worker and in each compose worker with no extra process, and sweeps
of several workers at once are safe (each failure is a conditional UPDATE).
"""

from __future__ import annotations

import logging
import threading
import uuid

from django.db import close_old_connections

from playground import services

logger = logging.getLogger(__name__)


def sweep_once() -> list[uuid.UUID]:
    """One sweep; a failing one (the database is down, say) is logged and tried again
    at the next interval."""
    close_old_connections()  # a connection the database dropped is replaced, not reused
    try:
        return services.run_fail_stale()
    except Exception:
        logger.exception("the sweep of stale runs failed; trying again later")
        return []


class Sweeper:
    """The sweeping thread of one worker process, stopped with the worker."""

    def __init__(self, *, every_s: float) -> None:
        self.every_s = every_s
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="stale-run-sweep", daemon=True)

    def start(self) -> Sweeper:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=self.every_s + 5)

    def _loop(self) -> None:
        while not self.stopped.wait(self.every_s):
            sweep_once()
