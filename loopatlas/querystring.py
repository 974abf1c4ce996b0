"""Query strings as keys: one form for every way of writing the same query."""

from urllib.parse import urlencode

from django.http import QueryDict


def query_normalised(query: QueryDict) -> str:
    """The query string with its parameters sorted and repeated ones given once.

    Every parameter is a filter combined with *and* or a set of values, so neither the
    order nor repeats change the answer.
    """
    pairs = {(name, value) for name, values in query.lists() for value in values}
    return urlencode(sorted(pairs))
