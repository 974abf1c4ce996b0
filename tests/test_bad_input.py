"""No input gives a server error: every endpoint and form, with what a hostile or broken
client sends (repeats, huge values, wrong types, invalid UTF-8, NUL, nesting, unknown
parameters, oversized bodies, wrong methods). Each case must be answered below 500, and
the test lists every case that was not.

Run on SQLite and on PostgreSQL (which, unlike SQLite, refuses NUL in text).
"""

import json
import uuid
from collections.abc import Iterator

import pytest
from django.core.cache import cache
from django.test import Client

from atlas.datafile import records_from_file
from atlas.services import atlas_load
from loopatlas.api.parsers import MAX_BODY_BYTES
from playground.models import Run
from tests.atlas.conftest import SMALL_ATLAS

# transaction=True: the event stream reads on a pooled thread, which must see committed rows.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WORK = "universal-transformers"
RUN = uuid.UUID("00000000-0000-4000-8000-000000000001")
MISSING = uuid.UUID("00000000-0000-4000-8000-0000000000ff")

GETS = [
    "/",
    f"/works/{WORK}/",
    "/works/no-such-work/",
    "/compare/",
    "/playground/",
    "/playground/runs/",
    f"/playground/runs/{RUN}/",
    f"/playground/compare/?runs={RUN}",
    f"/playground/compare/?runs={RUN},{MISSING}",
    f"/runs/{MISSING}/events",
    "/api/v1/",
    "/api/v1/works/",
    f"/api/v1/works/{WORK}/",
    "/api/v1/facets/",
    "/api/v1/timeline/",
    "/api/v1/compare/",
    "/api/v1/export/",
    "/api/v1/runs/",
    f"/api/v1/runs/{RUN}/",
    f"/api/v1/runs/{RUN}/tokens/",
    f"/api/v1/runs/compare/?runs={RUN}",
    f"/api/v1/runs/compare/?runs={RUN},{RUN},{MISSING},x",
    "/api/v1/runs/models/",
    "/api/schema/",
]
POSTS = [
    "/api/v1/suggestions/",
    "/api/v1/runs/",
    f"/api/v1/runs/{RUN}/cancel/",
    f"/works/{WORK}/suggest/",
    "/compare/pick/",
    "/playground/",
    f"/playground/runs/{RUN}/stop/",
    f"/playground/runs/{RUN}/compare/",
]

QUERIES = {
    "repeats": "&".join(["modality=language"] * 999 + ["works=" + WORK] * 500),
    "many distinct": "&".join(f"topics=t{n}" for n in range(500)),
    "too many fields": "&".join(f"f{n}=1" for n in range(1200)),
    "huge value": "search=" + "a" * 100_000,
    "huge list": "works=" + ",".join(f"w{n}" for n in range(5000)),
    "huge name": "x" * 10_000 + "=1",
    "wrong types": "page=abc&page_size=-3&month_from=99999-99&month_to=0000&q=x&last_event_id=x",
    "huge numbers": "page=99999999999999999999999&page_size=1e9&last_event_id=99999999999999999999",
    "invalid utf-8": "search=%FF%FE&modality=%C3%28&works=%80&ordering=%FF",
    "nul": "search=a%00b&works=a%00b&topics=%00&month_from=%00&modality=%00",
    "unknown": "nope=1&format=xml",
    "nesting": "modality[]=language&a[b][c]=1&works[0]=x",
    "empty": "works=&modality=&month_from=&search=&page=&ordering=",
    "path-like": "format=../../etc/passwd&works=../x",
    "hostile run ids": "runs=%00,%FF,,"
    + ",".join(str(uuid.UUID(int=n)) for n in range(2000))
    + "&format=csv",
}

FIELDS = {
    "work": WORK,
    "field": "venue",
    "proposed_value": "ICLR",
    "rationale": "r",
    "slug": WORK,
    "prompt": "def f(x):",
    "model": "ouro-tiny",
    "compare-preset": "q",
}
JSON_BODIES = {
    "nested": b"[" * 100_000,
    "nested object": b'{"a":' * 5_000 + b"1" + b"}" * 5_000,
    "oversized": json.dumps({"prompt": "a" * (MAX_BODY_BYTES + 10)}).encode(),
    "invalid utf-8": b'{"prompt": "\xff\xfe", "work": "\xc3\x28"}',
    "nul": json.dumps({key: f"a\x00{value}" for key, value in FIELDS.items()}).encode(),
    "not an object": b"[1, 2, 3]",
    "a string": b'"hello"',
    "null": b"null",
    "truncated": b'{"prompt": "x"',
    "nan": b'{"q": NaN, "temperature": Infinity, "prompt": "x"}',
    "wrong types": json.dumps(
        {
            "work": 5,
            "field": [],
            "proposed_value": {"a": 1},
            "prompt": ["x"],
            "max_new_tokens": "many",
            "q": "high",
            "loops": True,
            "seed": None,
            "extrapolate": "perhaps",
        }
    ).encode(),
    "huge numbers": json.dumps(
        FIELDS | {"max_new_tokens": 10**100, "seed": 10**40, "q": 1e308, "loops": -(10**30)}
    ).encode(),
    "huge strings": json.dumps({key: "a" * 50_000 for key in FIELDS}).encode(),
    "unknown keys": json.dumps(FIELDS | {"admin": True, "status": "done", "id": "x"}).encode(),
}
FORM_BODIES = {
    "nul": "&".join(f"{key}=a%00{value}" for key, value in FIELDS.items()),
    "invalid utf-8": "prompt=%FF%FE&slug=%C3%28&field=%80",
    "too many fields": "&".join(f"f{n}=1" for n in range(1200)),
    "oversized": "prompt=" + "a" * (3 * 1024 * 1024),
    "wrong types": "max_new_tokens=many&q=high&seed=-1&loops=1e99&picked=&temperature=nan",
    "repeats": "&".join(["slug=" + WORK] * 500 + ["prompt=x"] * 500),
    "nesting": "prompt[]=x&a[b][c]=1",
}
OTHER_CONTENT: dict[str, bytes | str] = {
    "text/plain": b"hello",
    "multipart/form-data; boundary=x": b"--x\r\nContent-Disposition: form-data; name=a\r\n\r\n1",
    "application/xml": b"<a/>",
    "application/json; charset=latin-1": '{"prompt": "café"}',
}
WRONG_METHODS = ["put", "patch", "delete", "options", "head", "trace"]


@pytest.fixture
def site(db) -> None:
    """The small atlas, one finished run, and no throttle history."""
    atlas_load(records=records_from_file(SMALL_ATLAS), source=SMALL_ATLAS.name)
    cache.clear()
    Run.objects.create(id=RUN, prompt="def f(x):", model="ouro-tiny", status=Run.Status.DONE)


def _cases() -> Iterator[tuple[str, str, str, dict]]:
    """(what, method, path, client keyword arguments) for every endpoint."""
    for path in GETS:
        yield "plain", "get", path, {}
        for name, query in QUERIES.items():
            yield name, "get", f"{path}?{query}", {}
        for method in [*WRONG_METHODS, "post"]:
            yield f"wrong method {method}", method, path, {}
    for path in POSTS:
        for name, body in JSON_BODIES.items():
            yield f"json {name}", "post", path, {"data": body, "content_type": "application/json"}
        for name, form in FORM_BODIES.items():
            kwargs = {"data": form, "content_type": "application/x-www-form-urlencoded"}
            yield f"form {name}", "post", path, kwargs
        for content_type, payload in OTHER_CONTENT.items():
            yield content_type, "post", path, {"data": payload, "content_type": content_type}
        yield "query", "post", f"{path}?{QUERIES['repeats']}", {"data": FIELDS}
        for method in WRONG_METHODS:
            yield f"wrong method {method}", method, path, {}


@pytest.mark.parametrize("area", ["/api/v1/", "/api/schema", "/playground", "/runs", "/"])
def test_no_bad_input_gives_a_server_error(site, area) -> None:
    # given every case for the endpoints of one area (the longest prefix that matches)
    areas = ["/api/v1/", "/api/schema", "/playground", "/runs", "/"]
    mine = [
        case
        for case in _cases()
        if max((a for a in areas if case[2].startswith(a)), key=len) == area
    ]
    assert mine
    client = Client(raise_request_exception=False)
    # when each is sent
    errors = []
    for what, method, path, kwargs in mine:
        response = getattr(client, method)(path, **kwargs)
        if response.status_code >= 500:
            errors.append(f"{method.upper()} {path[:80]} ({what}): {response.status_code}")
    # then none was a server error
    assert errors == []
