"""Who is asking: the visitor behind a request, for per-visitor limits and run ownership.

- A page visitor is their browser session: the session holds a random owner secret, made
  at their first submit. Runs started from the page carry its hash, and the same
  session may stop them.
- An API client is its client address; each run it creates gets its own cancel token,
  returned once in the 201, of which only the hash is stored.
- The client address is DRF's throttle identification (``BaseThrottle.get_ident``):
  ``REMOTE_ADDR``, or the ``X-Forwarded-For`` entry ``NUM_PROXIES`` from the right when
  the operator says that many proxies sit in front (``NUM_PROXIES``, default 0: forwarded
  headers are ignored, so a made-up one changes nothing).

The submit rate and the open-stream cap count per address (page and API together), which
dropping a cookie does not reset; the active-run limit counts per visitor as above and
per address too (each run stores both), so a fresh cookie buys no new slot.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from django.http import HttpRequest
from django.http.request import HttpHeaders
from rest_framework.throttling import BaseThrottle

SESSION_SECRET = "playground_owner"


def secret_hash(secret: str) -> str:
    """What a run stores of its owner's secret (a session's, or an API cancel token)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_new() -> str:
    return secrets.token_urlsafe(32)


def visitor_address(meta: Mapping[str, str]) -> str:
    """The client address from a request's ``META`` (``REMOTE_ADDR``,
    ``HTTP_X_FORWARDED_FOR``), trusting forwarded headers only as far as ``NUM_PROXIES``."""
    # get_ident reads only these two attributes, which a plain ASGI scope can give too.
    request: Any = SimpleNamespace(META=meta, headers=HttpHeaders(meta))
    return f"address:{BaseThrottle().get_ident(request)}"


def session_secret(request: HttpRequest, *, create: bool = False) -> str:
    """The page visitor's owner secret ('' when the session has none and ``create`` is
    off); reading it needs the session, so call it from sync code."""
    secret = request.session.get(SESSION_SECRET, "")
    if not secret and create:
        secret = request.session[SESSION_SECRET] = secret_new()
    return secret


def visitor_of_session(secret: str) -> str:
    """The visitor key of a page session, from its owner secret."""
    return f"session:{secret_hash(secret)[:32]}"
