"""Per-address limits for plain Django views (DRF's throttles serve the API).

The client address is DRF's: ``REMOTE_ADDR``, or the ``X-Forwarded-For`` entry that the
``NUM_PROXIES`` trusted proxies appended, so a made-up header cannot reset a limit.
"""

from typing import cast

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from rest_framework.request import Request
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView


class AddressRateThrottle(AnonRateThrottle):
    """An anonymous per-address rate that a plain Django view can check too."""

    def allow_page_request(self, request: HttpRequest) -> bool:
        """The throttle reads only the address (``META``), the user and the cache, which a
        plain Django request has as well as a DRF one."""
        return self.allow_request(cast(Request, request), cast(APIView, None))

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
