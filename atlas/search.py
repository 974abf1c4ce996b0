"""Full-text search over title, summary and authors, on PostgreSQL and on SQLite.

Both databases keep one stored, generated ``search_document`` column, so the searched
text is never stale and never maintained by hand. On PostgreSQL it is a ``tsvector``
(GIN-indexed) matched with ``websearch_to_tsquery``, which accepts anything a visitor
types; on SQLite it is the concatenated text, matched word by word with ``LIKE``.
"""

from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchVectorExact
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Field, Func, QuerySet, TextField, Value
from django.db.models.functions import Cast, Concat
from django.db.models.sql.compiler import SQLCompiler

SEARCH_CONFIG = "english"


class SearchDocumentField(Field):
    """The column type of ``search_document``: ``tsvector`` on PostgreSQL, text elsewhere."""

    def db_type(self, connection):
        return "tsvector" if connection.vendor == "postgresql" else "text"


class SearchDocument(Func):
    """The generation expression of ``search_document`` over the named fields."""

    output_field = SearchDocumentField()

    def __init__(self, *fields: str) -> None:
        parts: list = []
        for name in fields:
            parts += [Cast(name, TextField()), Value(" ")]
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


def search_filter(queryset: QuerySet, text: str) -> QuerySet:
    """Narrow ``queryset`` to works whose title, summary or authors match ``text``."""
    if connections[queryset.db].vendor == "postgresql":
        query = SearchQuery(text, config=SEARCH_CONFIG, search_type="websearch")
        return queryset.filter(SearchVectorExact(F("search_document"), query))
    for word in text.split():
        queryset = queryset.filter(search_document__icontains=word)
    return queryset
