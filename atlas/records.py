"""What a valid work looks like, field by field, for the data file and for suggestions.

The loader checks every row of the curated file with ``record_from_row``; a correction
proposed by a visitor is parsed by ``value_from_text`` and checked by the very same
field rules, so the two can never disagree about what the atlas accepts.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from atlas import taxonomy

SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MONTH_RE = re.compile(r"^([0-9]{4})-([0-9]{2})$")
ARXIV_RE = re.compile(r"^(\d{4}\.\d{4,5}|[a-z][a-z.-]*(\.[A-Z]{2})?/\d{7})(v\d+)?$")
# Characters RFC 3986 keeps out of URLs (they are percent-encoded): whitespace would let a
# value hold two URLs, and a brace or quote end the value in a BibTeX or HTML export.
URL_UNSAFE_RE = re.compile(r'[\s"<>\\^`{|}]')
CONFIDENCES = ("high", "medium", "low")
LIST_SEPARATOR = ";"


class RecordError(ValueError):
    """A value the atlas refuses; the message says why, for a person to fix it."""


def _text(
    max_length: int, *, optional: bool = False, one_line: bool = False
) -> Callable[[Any], str]:
    def clean(value: Any) -> str:
        if value is None and optional:
            return ""
        if not isinstance(value, str):
            raise RecordError(f"must be text, not {_type_name(value)}")
        value = value.strip()
        if not value and not optional:
            raise RecordError("must not be empty")
        if len(value) > max_length:
            raise RecordError(f"is longer than {max_length} characters")
        if one_line and len(value.splitlines()) > 1:
            raise RecordError("must be one line")
        return value

    return clean


text_rule = _text  # a bounded text's check, for inputs beside a work's (a proposal's "why")


def _pattern(regex: re.Pattern[str], what: str, max_length: int, *, optional: bool = False):
    text = _text(max_length, optional=optional)

    def clean(value: Any) -> str:
        value = text(value)
        if value and not regex.match(value):
            raise RecordError(f"{value!r} is not {what}")
        return value

    return clean


def _url(value: Any) -> str:
    value = _text(500, optional=True)(value)
    if URL_UNSAFE_RE.search(value):
        raise RecordError(
            f"{value!r} is not one http(s) URL: percent-encode its spaces, quotes, braces "
            "and any of <>\\^`|"
        )
    if value:
        try:
            URLValidator(schemes=["http", "https"])(value)
        except ValidationError as exc:
            raise RecordError(f"{value!r} is not an http(s) URL") from exc
    return value


def _month(value: Any) -> date:
    value = _text(100)(value)
    match = MONTH_RE.match(value)
    if not match or int(match[1]) < 1 or not 1 <= int(match[2]) <= 12:  # no year 0
        raise RecordError(f"{value!r} is not a month in the form YYYY-MM")
    return date(int(match[1]), int(match[2]), 1)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise RecordError(f"must be true or false, not {_type_name(value)}")
    return value


def _position(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RecordError(f"must be a whole number from 1, not {value!r}")
    return value


def _confidence(value: Any) -> str:
    value = _text(8, optional=True)(value)
    if value and value not in CONFIDENCES:
        raise RecordError(f"{value!r} is not one of {', '.join(CONFIDENCES)}")
    return value


def _list(item: Callable[[Any], str]) -> Callable[[Any], list[str]]:
    def clean(value: Any) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise RecordError(f"must be a list, not {_type_name(value)}")
        items = [item(element) for element in value]
        duplicates = sorted({x for x in items if items.count(x) > 1})
        if duplicates:
            raise RecordError(f"lists {', '.join(map(repr, duplicates))} more than once")
        return items

    return clean


def not_allowed(name: str, value: object, allowed: Sequence[str]) -> str:
    """The message for a value outside a vocabulary: it names the allowed values."""
    return f"{value!r} is not an allowed {name} value; allowed: {', '.join(allowed)}"


def _term(facet: taxonomy.Facet) -> Callable[[Any], str]:
    def clean(value: Any) -> str:
        if value not in facet.slugs:
            raise RecordError(not_allowed(facet.name, value, facet.slugs))
        return value

    return clean


SEED_SOURCE_RE = re.compile(r"^seed \d{3}(_[0-9a-f]+)?$")
# An entry of a public list's catalogue: ``owner/repo@commit:path#entry``.
LIST_SOURCE_RE = re.compile(
    r"^(?P<repo>[\w.-]+/[\w.-]+)@(?P<commit>[0-9a-f]{7,40}):(?P<path>[\w./-]+)#(?P<entry>\S+)$"
)
EVIDENCE_KEYS = ("note", "source", "conflict")
SOURCE_KINDS = ("summary", "facts", "seed", "list", "url")


def evidence_source_kind(source: str) -> str:
    """What a basis rests on: the work's summary, its facts row, a seed document, a public
    list's entry for the work, or a URL."""
    if source in ("summary", "facts"):
        return source
    if SEED_SOURCE_RE.match(source):
        return "seed"
    return "list" if LIST_SOURCE_RE.match(source) else "url"


def list_entry_url(source: str) -> str:
    """Where a list entry can be read: the catalogue file at the cited commit."""
    found = LIST_SOURCE_RE.match(source)
    if found is None:
        raise ValueError(f"{source!r} is not a list entry")
    return "https://github.com/{repo}/blob/{commit}/{path}".format(**found.groupdict())


def evidence_source_check(value: Any) -> str:
    """A basis's source: ``summary``, ``facts``, ``seed NNN…`` or an http(s) URL."""
    value = _text(500)(value)
    if value in ("summary", "facts") or SEED_SOURCE_RE.match(value) or LIST_SOURCE_RE.match(value):
        return value
    try:
        return _url(value)
    except RecordError:
        raise RecordError(
            f"{value!r} is not a source: 'summary', 'facts', 'seed NNN', a list entry "
            "'owner/repo@commit:path#entry' or an http(s) URL"
        ) from None


def _basis(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise RecordError(f"must be a mapping with note and source, not {_type_name(value)}")
    unknown = sorted(set(value) - set(EVIDENCE_KEYS), key=str)
    if unknown:
        raise RecordError(f"unknown key(s): {', '.join(map(str, unknown))}")
    basis = {
        "note": _text(500)(value.get("note")),
        "source": evidence_source_check(value.get("source")),
    }
    conflict = _text(1000, optional=True)(value.get("conflict"))
    return {**basis, "conflict": conflict} if conflict else basis


def _evidence(value: Any) -> dict[str, dict[str, str]]:
    """The basis of facet values: ``{facet: {note, source[, conflict]}}``, facets in
    vocabulary order."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RecordError(f"must be a mapping of facets to their basis, not {_type_name(value)}")
    names = [facet.name for facet in taxonomy.FACETS]
    unknown = sorted(set(value) - set(names), key=str)
    if unknown:
        raise RecordError(
            f"{', '.join(map(repr, unknown))}: not a facet; facets: {', '.join(names)}"
        )
    evidence = {}
    for name in names:
        if name in value:
            try:
                evidence[name] = _basis(value[name])
            except RecordError as exc:
                raise RecordError(f"{name}: {exc}") from None
    return evidence


def _type_name(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


@dataclass(frozen=True)
class FieldRule:
    """How one field of a work is checked, and whether visitors may propose corrections."""

    clean: Callable[[Any], Any]
    label: str
    required: bool = False
    correctable: bool = True
    default: Any = None


FIELD_RULES: dict[str, FieldRule] = {
    "n": FieldRule(_position, "Position", required=True, correctable=False),
    "slug": FieldRule(
        _pattern(SLUG_RE, "a slug (lowercase words joined by hyphens)", 200),
        "Slug",
        required=True,
        correctable=False,
    ),
    "title": FieldRule(_text(500, one_line=True), "Title", required=True),
    "summary": FieldRule(_text(5000), "Summary", required=True),
    "month": FieldRule(_month, "Month of first publication", required=True),
    "month_estimated": FieldRule(_bool, "Month is estimated", default=False),
    "arxiv_id": FieldRule(
        _pattern(ARXIV_RE, "an arXiv identifier such as 2406.01234", 32, optional=True),
        "arXiv id",
    ),
    "url": FieldRule(_url, "URL"),
    "code_url": FieldRule(_url, "Code URL"),
    "authors": FieldRule(_list(_text(200, one_line=True)), "Authors", default=[]),
    "authors_et_al": FieldRule(_bool, "Author list is truncated", default=False),
    "venue": FieldRule(_text(200, optional=True, one_line=True), "Venue"),
    "facts_confidence": FieldRule(_confidence, "Confidence of the facts", correctable=False),
    "facts_source": FieldRule(_text(500, optional=True), "Source of the facts", correctable=False),
    **{
        facet.name: FieldRule(
            _list(_term(facet)) if facet.multi else _term(facet), facet.label, required=True
        )
        for facet in taxonomy.FACETS
    },
    "topics": FieldRule(
        _list(_pattern(SLUG_RE, "a topic slug (lowercase words joined by hyphens)", 100)),
        "Topics",
        default=[],
    ),
    "evidence": FieldRule(_evidence, "Basis of the labels", correctable=False, default={}),
    "short_names": FieldRule(
        _list(_text(60, one_line=True)), "Names other works use", correctable=False, default=[]
    ),
}
LIST_FIELDS = frozenset(
    name for name, rule in FIELD_RULES.items() if isinstance(rule.default, list)
) | {facet.name for facet in taxonomy.MULTI_FACETS}
BOOL_FIELDS = frozenset({"month_estimated", "authors_et_al"})
CORRECTABLE_FIELDS: dict[str, str] = {
    name: rule.label for name, rule in FIELD_RULES.items() if rule.correctable
}


@dataclass(frozen=True)
class WorkRecord:
    """One checked work, with every optional value normalised (``""``, ``[]``, ``False``)."""

    values: dict[str, Any]

    @property
    def slug(self) -> str:
        return self.values["slug"]

    @property
    def position(self) -> int:
        return self.values["n"]


def record_from_row(row: Any) -> WorkRecord:
    """Check one row of the data file, refusing unknown, missing and invalid fields."""
    if not isinstance(row, Mapping):
        raise RecordError(f"must be a mapping of field names to values, not {_type_name(row)}")
    unknown = sorted(set(row) - set(FIELD_RULES), key=str)
    if unknown:
        raise RecordError(f"unknown field(s): {', '.join(map(str, unknown))}")
    values = {}
    for name, rule in FIELD_RULES.items():
        if name not in row and rule.required:
            raise RecordError(f"{name}: is required")
        raw = row.get(name, rule.default)
        try:
            values[name] = rule.clean(raw)
        except RecordError as exc:
            raise RecordError(f"{name}: {exc}") from None
    return WorkRecord(values)


def value_from_text(field: str, text: str) -> Any:
    """Parse a visitor's text for one correctable field (lists separated by ``;``)."""
    if field not in CORRECTABLE_FIELDS:
        raise RecordError(f"{field!r} cannot be corrected here")
    text = text.strip()
    raw: Any
    if field in LIST_FIELDS:
        raw = [part.strip() for part in text.split(LIST_SEPARATOR) if part.strip()]
    elif field in BOOL_FIELDS:
        answers = {"yes": True, "true": True, "no": False, "false": False}
        if text.lower() not in answers:
            raise RecordError("answer yes or no")
        raw = answers[text.lower()]
    else:
        raw = text or None
    return FIELD_RULES[field].clean(raw)


def value_to_text(value: Any) -> str:
    """The canonical text form of a field value (what suggestions store and show)."""
    if isinstance(value, list):
        return f"{LIST_SEPARATOR} ".join(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, date):
        return f"{value:%Y-%m}"
    return str(value)
