"""Anonymous rate limits per address (rates in ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``,
counted atomically by ``loopatlas.throttling``).

The page's suggestion form and the API's ``suggestions/`` share one budget per address:
they are the same write.
"""

from loopatlas.throttling import AddressRateThrottle


class SuggestionThrottle(AddressRateThrottle):
    scope = "suggestions"


class ProposalThrottle(AddressRateThrottle):
    """New works proposed, by the page's form and the API alike (one budget)."""

    scope = "proposals"


class ExportThrottle(AddressRateThrottle):
    scope = "exports"
