"""The request body parser for ``/api/v1/``: DRF's JSON one, bounded before it parses.

DRF reads the request stream itself, so Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` never
applies to it, and ``json`` recurses once per nesting level (100,000 ``[`` raise a
``RecursionError``, a 500). Here a body larger than ``MAX_BODY_BYTES`` is a 413 and JSON
nested deeper than ``MAX_JSON_DEPTH`` a 400, both before anything is decoded; no endpoint
takes a body anywhere near either limit (the largest is a 2,000-character prompt).
"""

import codecs
import re
from itertools import accumulate
from typing import IO, Any

from django.conf import settings
from rest_framework import parsers, status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.utils import json  # json.loads refusing NaN and Infinity

MAX_BODY_BYTES = 256 * 1024
MAX_JSON_DEPTH = 32

_JSON_STRING = re.compile(rb'"(?:\\.|[^"\\])*"', re.DOTALL)
_NOT_A_BRACKET = bytes(set(range(256)) - set(b"[]{}"))


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = f"The request body is larger than {MAX_BODY_BYTES} bytes."
    default_code = "body_too_large"


def body_read(stream: IO[bytes] | None) -> bytes:
    """The whole body, refused with a 413 past ``MAX_BODY_BYTES`` (never read further)."""
    if stream is None:
        return b""
    body = stream.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise BodyTooLarge()
    return body


def json_depth(body: bytes) -> int:
    """How deeply arrays and objects nest in a JSON text (brackets inside strings ignored)."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_A_BRACKET)
    steps = (1 if byte in b"[{" else -1 for byte in brackets)
    return max(accumulate(steps), default=0)


class JSONParser(parsers.JSONParser):
    def parse(
        self, stream: IO[bytes], media_type: str | None = None, parser_context: Any = None
    ) -> Any:
        body = body_read(stream)
        if json_depth(body) > MAX_JSON_DEPTH:
            raise ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels.")
        try:
            encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
            return json.loads(codecs.decode(body, encoding))
        except ValueError as exc:  # UnicodeDecodeError is one
            raise ParseError(f"JSON parse error - {exc}") from exc
