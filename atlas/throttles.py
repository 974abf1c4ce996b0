"""Anonymous rate limits (rates in ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``).

The page's suggestion form and the API's ``suggestions/`` share one budget per address:
they are the same write.
"""

from typing import cast

from django.http import HttpRequest
from rest_framework.request import Request
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView


class SuggestionThrottle(AnonRateThrottle):
    scope = "suggestions"

    def allow_page_request(self, request: HttpRequest) -> bool:
        """The page form's check: the throttle reads only the address (``META``) and the
        cache, which a plain Django request has as well as a DRF one."""
        return self.allow_request(cast(Request, request), cast(APIView, None))


class ExportThrottle(AnonRateThrottle):
    scope = "exports"
