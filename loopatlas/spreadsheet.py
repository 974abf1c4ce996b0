"""CSV cells a spreadsheet shows rather than runs (OWASP's CSV injection advice), for every
CSV the site writes: the atlas's exports and the playground's token and compare tables."""

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert(text: str) -> str:
    """``text`` with a leading apostrophe when it starts as a formula does (``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return); other text unchanged."""
    return "'" + text if text.startswith(_FORMULA_STARTS) else text
