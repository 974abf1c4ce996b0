"""Anonymous rate limits (rates in ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``).

The page's suggestion form and the API's ``suggestions/`` share one budget per address:
they are the same write.
"""

from rest_framework.throttling import AnonRateThrottle

from loopatlas.throttling import AddressRateThrottle


class SuggestionThrottle(AddressRateThrottle):
    scope = "suggestions"


class ExportThrottle(AnonRateThrottle):
    scope = "exports"
