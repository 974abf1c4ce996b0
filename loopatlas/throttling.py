"""Per-address rate limits, counted atomically, for DRF views and plain Django views alike.

DRF's ``SimpleRateThrottle`` keeps each address's request times as a list in the cache
and reads, appends and writes it back: requests arriving together all read the same
list, so a burst passes however low the rate (25 of 25 at 12/minute on Redis). Here each
address has one counter per window, taken with the cache's ``incr`` (Redis ``INCRBY``;
LocMem's under its lock), so concurrent requests get distinct counts and exactly the
rate passes. Windows are fixed: an address may spend its budget at the end of one window
and again at the start of the next (at most twice the rate across a boundary), and each
address's windows start at an offset of their own, so not every budget renews at once.

The client address is DRF's: ``REMOTE_ADDR``, or the ``X-Forwarded-For`` entry that the
``NUM_PROXIES`` trusted proxies appended, so a made-up header cannot reset a limit. With
the cache unreachable (``loopatlas.cache``) nothing is counted and requests go through.
"""

import zlib
from contextlib import suppress
from typing import cast

from django.contrib import admin
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from rest_framework.request import Request
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

# A window's counter lives a window and this much from its first request, so it outlasts
# its window, and a request computed for the window's last moment still finds it (an
# increment of a vanished key would not expire).
COUNTER_GRACE_S = 5


def budget_take(key: str, *, limit: int, period: int, cost: int = 1, now: float) -> float | None:
    """Take ``cost`` from ``key``'s budget of ``limit`` per ``period`` seconds at ``now``:
    ``None`` when taken, else the seconds until the window ends (a refusal takes nothing)."""
    offset = zlib.crc32(key.encode()) % period
    window = int((now - offset) // period)
    left = (window + 1) * period + offset - now
    counter = f"{key}:{window}"
    cache.add(counter, 0, timeout=period + COUNTER_GRACE_S)
    try:
        count = cache.incr(counter, cost)
    except ValueError:  # not there: the cache is unreachable (or evicted it), count nothing
        return None
    if count <= limit:
        return None
    with suppress(ValueError):
        cache.decr(counter, cost)
    return left


class AddressRateThrottle(AnonRateThrottle):
    """An anonymous per-address rate (``scope`` names it in ``DEFAULT_THROTTLE_RATES``),
    counted by ``budget_take``; a plain Django view can check it too."""

    num_requests: int  # DRF's __init__ sets both from the rate (read only when it has one)
    duration: int
    refused_for: float | None = None

    def allow_request(self, request: Request, view: APIView | None, *, cost: int = 1) -> bool:
        """Whether the request may go on, taking ``cost`` requests from the budget if so."""
        if self.rate is None:
            return True
        key = self.get_cache_key(request, cast(APIView, view))
        if key is None:
            return True
        self.refused_for = budget_take(
            key, limit=self.num_requests, period=self.duration, cost=cost, now=self.timer()
        )
        return self.refused_for is None

    def wait(self) -> float | None:
        """Seconds until the refused request's window ends (DRF's ``Retry-After``)."""
        return self.refused_for

    def allow_page_request(self, request: HttpRequest, *, cost: int = 1) -> bool:
        """The throttle reads only the address (``META``), the user and the cache, which a
        plain Django request has as well as a DRF one."""
        return self.allow_request(cast(Request, request), None, cost=cost)

    def wait_minutes(self) -> int:
        """Whole minutes until the next attempt is allowed (at least one)."""
        return max(1, round((self.wait() or 60) / 60))


class AdminLoginThrottle(AddressRateThrottle):
    """Sign-in attempts to the admin per address (``THROTTLE_ADMIN_LOGIN``)."""

    scope = "admin_login"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        # Counted for everyone: the person signing in is not authenticated yet, and a
        # signed-in session posting the form again is still an attempt.
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


def admin_login(
    request: HttpRequest, extra_context: dict[str, object] | None = None
) -> HttpResponseBase:
    """The admin's sign-in, with each POST counted against the address's budget."""
    if request.method == "POST":
        throttle = AdminLoginThrottle()
        if not throttle.allow_page_request(request):
            minutes = throttle.wait_minutes()
            return HttpResponse(
                f"Too many sign-in attempts from your address; try again in {minutes} min.",
                status=429,
                content_type="text/plain; charset=utf-8",
                headers={"Retry-After": str(minutes * 60)},
            )
    return admin.site.login(request, extra_context)
