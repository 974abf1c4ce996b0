"""Full-text search over title, summary, authors, venue and code link, on PostgreSQL and
on SQLite; an arXiv identifier (``1807.03819``, ``arXiv:1807.03819v2``, its abs URL) finds
its work directly.

Both databases keep one stored, generated ``search_document`` column, so the searched
text is never stale and never maintained by hand. On PostgreSQL it is a ``tsvector``
(GIN-indexed) matched with ``websearch_to_tsquery``, which accepts anything a visitor
types; on SQLite it is the concatenated text, matched word by word with ``LIKE``.
"""

import re
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchVectorExact
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Field, Func, QuerySet, TextField, Value
from django.db.models.functions import Cast, Concat, Replace
from django.db.models.sql.compiler import SQLCompiler

SEARCH_CONFIG = "english"


class SearchDocumentField(Field):
    """The column type of ``search_document``: ``tsvector`` on PostgreSQL, text elsewhere."""

    def db_type(self, connection):
        return "tsvector" if connection.vendor == "postgresql" else "text"


class SearchDocument(Func):
    """The generation expression of ``search_document`` over the named fields."""

    output_field = SearchDocumentField()

    def __init__(self, *fields: str | Func) -> None:
        parts: list = []
        for field in fields:
            parts += [Cast(field, TextField()) if isinstance(field, str) else field, Value(" ")]
        super().__init__(Concat(*parts[:-1], output_field=TextField()))

    def as_sql(
        self,
        compiler: SQLCompiler,
        connection: BaseDatabaseWrapper,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> tuple[str, tuple[Any, ...]]:
        """The concatenation alone: no function name around it."""
        return super().as_sql(
            compiler, connection, function, "%(expressions)s", arg_joiner, **extra_context
        )

    def as_postgresql(self, compiler, connection, **extra_context):
        template = f"to_tsvector('{SEARCH_CONFIG}'::regconfig, %(expressions)s)"
        return super().as_sql(compiler, connection, template=template, **extra_context)


def url_words(name: str) -> Func:
    """A URL with its slashes and dots as spaces, so that each part (``github``, the
    owner, the repository) is a word of its own (PostgreSQL keeps a URL as one token)."""
    return Replace(Replace(F(name), Value("/"), Value(" ")), Value("."), Value(" "))


ARXIV_QUERY_RE = re.compile(
    r"^(?:arxiv:|https?://(?:www\.)?arxiv\.org/(?:abs|pdf)/)?"
    r"(\d{4}\.\d{4,5}|[a-z][a-z.-]*/\d{7})(?:v\d+)?(?:\.pdf)?/?$",
    re.IGNORECASE,
)


def arxiv_query(text: str) -> str | None:
    """The arXiv identifier (without version) that ``text`` is, if it is one."""
    match = ARXIV_QUERY_RE.match(text.strip())
    return match[1] if match else None


def search_filter(queryset: QuerySet, text: str) -> QuerySet:
    """Narrow ``queryset`` to the work with the arXiv identifier ``text`` (any version), or
    to works whose title, summary, authors, venue or code link match ``text``."""
    identifier = arxiv_query(text)
    if identifier:
        return queryset.filter(arxiv_id__regex=rf"^{re.escape(identifier)}(v[0-9]+)?$")
    if connections[queryset.db].vendor == "postgresql":
        query = SearchQuery(text, config=SEARCH_CONFIG, search_type="websearch")
        return queryset.filter(SearchVectorExact(F("search_document"), query))
    for word in text.split():
        queryset = queryset.filter(search_document__icontains=word)
    return queryset
