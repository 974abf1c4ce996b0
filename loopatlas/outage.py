"""A database restart is waited out, not turned into a failure.

The web answers 503 while PostgreSQL is down (``loopatlas/middleware.py``); a worker in
the middle of a run and a viewer in the middle of a stream have no request to answer:
they wait for the database to come back, on a fresh connection, and go on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import InterfaceError, OperationalError, connection

logger = logging.getLogger(__name__)

RETRY_EVERY_S = 1.0
DATABASE_ERRORS = (OperationalError, InterfaceError)


def database_unreachable() -> bool:
    """Whether this thread's connection is gone, not merely a statement refused on a
    live one."""
    try:
        return connection.connection is None or not connection.is_usable()
    except Exception:  # a probe that fails is an answer too
        return True


def through_outage[T](action: Callable[[], T], *, budget_s: float, what: str) -> T:
    """``action()``, tried again every RETRY_EVERY_S on a fresh connection while the
    database is unreachable, for up to ``budget_s``. A database error on a live
    connection, or an outage past the budget, is raised."""
    deadline = time.monotonic() + budget_s
    while True:
        try:
            return action()
        except DATABASE_ERRORS as exc:
            if not database_unreachable() or time.monotonic() >= deadline:
                raise
            logger.warning("%s: the database is unreachable (%s); retrying", what, exc)
            connection.close()  # the next query connects afresh
            time.sleep(RETRY_EVERY_S)
