"""The API schema states what the server accepts, including what lives in the database.

drf-spectacular derives most of the schema from the code. What it cannot know is read
here, each time the schema is served (a ``POSTPROCESSING_HOOKS`` entry): the topics in use
and the slugs of the works and of the authors, which are the only values ``topics``,
``works``, ``author``, a work's or an author's path and a suggestion's ``work`` take, and
the bounds the filters apply (at most ``MAX_VALUES`` values a list parameter, the search
length, real months). A client generated from the schema then never sends a request the
server refuses as invalid.
"""

import re
from typing import Any

from django.db import DatabaseError

from atlas.filters import MAX_VALUES, MAX_WORKS_PARAM, SEARCH_MAX_LENGTH
from atlas.models import TOPIC, AtlasChange, Author, Work, WorkTag
from atlas.selectors import COMPARE_MAX

# A year 0001-9999, optionally a month 01-12; or nothing.
MONTH_PATTERN = r"^((\d{3}[1-9]|\d{2}[1-9]\d|\d[1-9]\d{2}|[1-9]\d{3})(-(0[1-9]|1[0-2]))?)?$"
NO_NUL_PATTERN = r"^[^\u0000]*$"  # NUL is refused (PostgreSQL cannot store it)
VERSION_TIME = "%Y-%m-%dT%H:%M:%SZ"  # a data version's time, as exports state it


def _slug_list_pattern(slugs: list[str], *, least: int, most: int) -> str:
    """Comma-separated slugs, each one of ``slugs``, between ``least`` and ``most`` of them."""
    one = "(" + "|".join(re.escape(slug) for slug in slugs) + ")"
    listed = f"{one}(,{one}){{0,{most - 1}}}"
    return f"^{listed}$" if least else f"^({listed})?$"


def _parameter_bounds(
    name: str,
    path: str,
    slugs: list[str],
    topics: list[str],
    versions: list[str],
    authors: list[str],
) -> dict:
    """The schema (merged into drf-spectacular's) for one atlas query parameter."""
    if name == "since":
        return {"enum": versions} if versions else {}
    if name == "topics":
        items = {"type": "string", "enum": topics} if topics else {"type": "string"}
        return {"items": items, "maxItems": MAX_VALUES if topics else 0}
    if name == "author":
        items = {"type": "string", "enum": authors} if authors else {"type": "string"}
        return {"items": items, "maxItems": MAX_VALUES if authors else 0}
    if name == "works" and path.endswith("/compare/"):
        return {"pattern": _slug_list_pattern(slugs, least=1, most=COMPARE_MAX), "minLength": 1}
    if name == "works":
        return {"pattern": _slug_list_pattern(slugs, least=0, most=MAX_WORKS_PARAM)}
    if name in ("month_from", "month_to"):
        return {"pattern": MONTH_PATTERN}
    if name == "search":
        return {"maxLength": SEARCH_MAX_LENGTH, "pattern": NO_NUL_PATTERN}
    return {}


def schema_atlas_bounds(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """Postprocessing hook: the atlas's query parameters, bounded exactly as served."""
    try:
        slugs = sorted(Work.objects.values_list("slug", flat=True))
        authors = sorted(Author.objects.values_list("slug", flat=True))
        topics = sorted(set(WorkTag.objects.filter(facet=TOPIC).values_list("value", flat=True)))
        changes = AtlasChange.objects.order_by("id").values_list("id", "at")
        versions = [v for id_, at in changes for v in (str(id_), at.strftime(VERSION_TIME))]
    except DatabaseError:  # no tables yet (a system check before migrate): code-derived only
        return result
    for path, operations in result["paths"].items():
        if not path.startswith("/api/v1/") or path.startswith("/api/v1/runs/"):
            continue
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                schema = parameter["schema"]
                if parameter["in"] == "path" and parameter["name"] == "slug":
                    of_path = authors if path.startswith("/api/v1/authors/") else slugs
                    if of_path:
                        schema["enum"] = of_path
                if parameter["in"] == "path" and parameter["name"] == "version" and versions:
                    schema["enum"] = versions
                if parameter["in"] != "query":
                    continue
                if schema.get("type") == "array":
                    schema["maxItems"] = MAX_VALUES
                schema |= _parameter_bounds(
                    parameter["name"], path, slugs, topics, versions, authors
                )
    suggestion = result["components"]["schemas"].get("SuggestionRequest", {})
    if slugs and "work" in suggestion.get("properties", {}):
        suggestion["properties"]["work"]["enum"] = slugs
    return result
