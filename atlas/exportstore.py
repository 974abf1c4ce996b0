"""Whole-atlas exports stored once per data version: a version never changes, so neither
do its files.

The first request for a (version, site, format) writes the file, and every later one
sends it from disk, in chunks when it is large, so no read after the first serializes the
atlas again and none holds a large file in memory. Concurrent first requests wait for
one writer instead of each serializing the atlas. Filtered exports are made per request:
their combinations are unbounded, and they are smaller. The directory keeps the newest
``EXPORT_STORE_FILES`` files; an older version's file is written again if asked for.
"""

import fcntl
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from uuid import uuid4

from django.conf import settings
from django.http import FileResponse, HttpResponse, HttpResponseBase

STREAM_MIN_BYTES = 4 * 1024 * 1024  # a smaller file goes out whole: one read, one write


def stored_export(key: str, make: Callable[[], bytes]) -> Path:
    """The file stored under ``key`` (which must name everything its bytes depend on),
    written by ``make()`` if no request has yet."""
    directory = Path(settings.EXPORT_STORE_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / hashlib.sha256(key.encode()).hexdigest()
    if path.exists():
        return path
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one writer; the others find its file
        if not path.exists():
            partial = path.with_name(f"{path.name}.{uuid4().hex}.partial")
            partial.write_bytes(make())
            os.replace(partial, path)  # readers see the whole file or none
            _prune(directory)
    return path


def _prune(directory: Path) -> None:
    files = sorted(
        (p for p in directory.iterdir() if not p.suffix),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in files[settings.EXPORT_STORE_FILES :]:
        old.unlink(missing_ok=True)
        old.with_suffix(".lock").unlink(missing_ok=True)


def file_response(path: Path, *, content_type: str, headers: dict[str, str]) -> HttpResponseBase:
    """The stored file as the answer: whole when small, streamed in chunks when large."""
    handle = path.open("rb")
    if os.fstat(handle.fileno()).st_size < STREAM_MIN_BYTES:
        with handle:
            return HttpResponse(handle.read(), content_type=content_type, headers=headers)
    response = FileResponse(handle, content_type=content_type)
    for name, value in headers.items():  # after FileResponse's own Content-Disposition
        response[name] = value
    return response
