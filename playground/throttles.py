"""The playground's submit rate: per client address, the page's form and the API together
(``playground_submits`` in ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``). Each run counts:
"Compare with…" takes one submit per sibling it starts."""

from rest_framework.settings import api_settings

from loopatlas.throttling import AddressRateThrottle


class RunSubmitThrottle(AddressRateThrottle):
    scope = "playground_submits"

    def get_rate(self) -> str | None:
        """The rate as the settings say now (DRF reads its class attribute once, at import)."""
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        return str(rate) if rate is not None else None

    def refusal(self, wait: float | None) -> str:
        """The 429's message, naming the limit."""
        return (
            f"Too many submits from your address: at most {self.rate} "
            f"(PLAYGROUND_VISITOR_SUBMITS); try again in {int(wait or 0) + 1} s."
        )
