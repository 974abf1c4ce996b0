"""Whole-atlas exports are stored once per data version and sent from the store."""

import threading
import time

import pytest

from atlas import exportstore
from atlas.models import Work
from tests.atlas.conftest import approve_kv

pytestmark = pytest.mark.django_db

FORMATS = ["json", "csv", "bibtex", "ris"]
EVERY_MONTH = "month_from=1900-01"  # a filter that keeps every work: made per request


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_stored_export_is_the_bytes_and_headers_the_renderer_makes(
    client, small_atlas, fmt
) -> None:
    # given the whole atlas, stored, and the same works made afresh through a filter
    stored = client.get(f"/api/v1/export/?format={fmt}")
    made = client.get(f"/api/v1/export/?format={fmt}&{EVERY_MONTH}")
    # then the bytes and the headers a client reads are the same
    assert stored.status_code == made.status_code == 200
    assert _body(stored) == _body(made)
    for header in ("Content-Type", "Content-Disposition", "X-Atlas-Data-Version", "Vary"):
        assert stored[header] == made[header]


def test_a_version_is_serialized_once_and_a_new_version_is_stored_anew(
    client, small_atlas, curator
) -> None:
    # given the stored export of the loaded version
    first = _body(client.get("/api/v1/export/?format=csv"))
    # when a work changes in place, without a reviewed change (the version stays)
    Work.objects.filter(slug="universal-transformers").update(title="Renamed in place")
    # then the version's file is what is sent: it was not serialized again
    assert _body(client.get("/api/v1/export/?format=csv")) == first
    # and when a reviewed change makes a new version, its export shows the data of now
    approve_kv(curator)
    now = _body(client.get("/api/v1/export/?format=csv"))
    assert b"Renamed in place" in now and b"no-kv" in now


def test_a_large_file_is_streamed_in_chunks(client, small_atlas, monkeypatch) -> None:
    # given a store that streams every file
    whole = client.get("/api/v1/export/?format=json")
    monkeypatch.setattr(exportstore, "STREAM_MIN_BYTES", 1)
    # when the same export is asked for again
    streamed = client.get("/api/v1/export/?format=json")
    # then it is streamed, the same bytes with the same headers
    assert not whole.streaming and streamed.streaming
    assert _body(streamed) == whole.content
    assert streamed["Content-Disposition"] == whole["Content-Disposition"]
    assert streamed["Content-Type"] == whole["Content-Type"]


def test_concurrent_first_requests_write_the_file_once(export_store) -> None:
    # given eight requests for the same file, released together
    made, paths = [], []
    barrier = threading.Barrier(8)

    def make() -> bytes:
        made.append(1)
        return b"the atlas"

    def request() -> None:
        barrier.wait()
        paths.append(exportstore.stored_export("version|site|csv", make))

    threads = [threading.Thread(target=request) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # then one of them made it, and all got the same whole file
    assert len(made) == 1
    assert {path.read_bytes() for path in paths} == {b"the atlas"}


def test_the_store_keeps_the_newest_files(export_store, settings) -> None:
    # given a store of two files
    settings.EXPORT_STORE_FILES = 2
    # when three are stored, one after another (apart by more than the file system's clock step)
    paths = []
    for n in range(3):
        paths.append(exportstore.stored_export(f"version {n}", str(n).encode))
        time.sleep(0.05)
    # then the two newest remain, and the oldest is written again when asked for
    assert [path.exists() for path in paths] == [False, True, True]
    again = exportstore.stored_export("version 0", lambda: b"0 again")
    assert again.read_bytes() == b"0 again"
