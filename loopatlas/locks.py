"""Transactions that must run one at a time: a count or a check, then an insert."""

from django.db import connection


def transaction_serialised(lock: int) -> None:
    """Make the current transaction the only one holding ``lock`` until it ends.

    On PostgreSQL, a transaction-level advisory lock: released at commit or rollback,
    needing no table or row (nothing to create, or to lose to a flush), and what the
    transaction reads after it (READ COMMITTED) includes what the lock's previous holder
    wrote. On SQLite the settings make every transaction IMMEDIATE, so the caller's
    ``atomic`` took the database's write lock at BEGIN and other writers wait there on the
    busy timeout (a DEFERRED transaction that read first could not upgrade to write once
    another had, and would fail "database is locked").
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock])
