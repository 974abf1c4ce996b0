"""Dead dependencies degrade, against real servers stopped and restarted mid-traffic.

The site runs as deployed (uvicorn, production-style settings apart from DEBUG) on a
PostgreSQL cluster and a Redis server of this test's own, on free ports, so stopping
them never touches the shared ones:
- Redis down: reads are served uncached, throttles let requests through (warning
  logged), submitting a playground run (it needs the broker) is a 503 naming Redis;
  with Redis back, reads are cached again.
- PostgreSQL down: every request is a 503 naming the database, never a 500; with it
  back, the same server answers again by itself, and so does a worker whose task threads
  kept their connections from before the restart.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopatlas.middleware import DATABASE_DOWN
from tests.playground.stack import Stack, free_port, read_run

pytestmark = [pytest.mark.slow, pytest.mark.services]

SMALL_ATLAS = Path(__file__).parent.parent / "atlas" / "data" / "works.yaml"
READS = ["/api/v1/works/?modality=language", "/api/v1/facets/", "/api/v1/export/?format=csv"]
PAGES = ["/", "/works/universal-transformers/", "/compare/?works=universal-transformers"]


def _require(binary: str | None, what: str) -> str:
    if binary is None or not os.path.exists(binary):
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail(f"{what} is not installed but REQUIRE_SERVICES=1")
        pytest.skip(f"{what} is not installed")
    return binary


def _wait(ready, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up")
        time.sleep(0.1)


class OwnRedis:
    """A redis-server of the test's own, without persistence."""

    def __init__(self, workdir: Path) -> None:
        self.binary = _require(shutil.which("redis-server"), "redis-server")
        self.workdir, self.port = workdir, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        import redis

        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)

        def up() -> bool:
            try:
                return bool(client.ping())
            except redis.exceptions.ConnectionError:
                return False

        _wait(up, "redis-server")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


class OwnPostgres:
    """A PostgreSQL cluster of the test's own (initdb into a temporary directory)."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        self.bin = Path(_require(found[-1] if found else None, "PostgreSQL's initdb")).parent
        # Its own directory under /tmp: pytest's are private to the user running the tests.
        self.data, self.port = Path(tempfile.mkdtemp(prefix="loopatlas-pg-")), free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        # PostgreSQL refuses to run as root: run it as the postgres user then.
        self.prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.prefix:
            shutil.chown(self.data, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-N")

    def _run(self, tool: str, *args: str) -> None:
        command = [*self.prefix, str(self.bin / tool), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode:
            raise RuntimeError(f"{tool} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.data.with_suffix(".log"))
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-w", "-l", log, "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)
        self.data.with_suffix(".log").unlink(missing_ok=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[tuple[Stack, OwnRedis, OwnPostgres]]:
    """uvicorn over the small atlas, on its own PostgreSQL and Redis."""
    workdir = tmp_path_factory.mktemp("faults")
    postgres, redis_server = OwnPostgres(), OwnRedis(workdir)
    postgres.start()
    redis_server.start()
    stack = Stack(workdir, database_url=postgres.url, redis_url=redis_server.url)
    stack.env["LOG_LEVEL"] = "WARNING"  # the test reads the cache's warning in the log
    try:
        stack.manage("migrate", "--noinput")
        stack.manage("load_atlas", str(SMALL_ATLAS))
        stack.start_web()
        yield stack, redis_server, postgres
    finally:
        stack.stop()
        redis_server.stop()
        postgres.stop()
        postgres.remove()


def _run_body() -> dict:
    return {"prompt": "def f(x):", "model": "ouro-tiny", "max_new_tokens": 4}


def _cache_entries(redis_server: OwnRedis) -> int:
    import redis

    return redis.Redis.from_url(redis_server.url).dbsize()


def test_with_redis_down_reads_and_throttles_fail_open_and_the_run_queue_is_a_503(site):
    stack, redis_server, _ = site
    # given the reads answered (and cached) while Redis is up
    before = {path: stack.get(path) for path in READS}
    assert all(response.status_code == 200 for response in before.values())
    assert _cache_entries(redis_server) > 0
    # when Redis stops
    redis_server.stop()
    try:
        # then reads are served, uncached, with the same content
        for path in READS:
            response = stack.get(path)
            assert response.status_code == 200 and response.content == before[path].content
        for path in PAGES:
            assert stack.get(path).status_code == 200
        # a throttled write goes through (the throttle has no history to refuse it on)
        suggestion = {"work": "universal-transformers", "field": "venue"}
        suggestion |= {"proposed_value": "ICLR", "rationale": "r"}
        assert stack.post("/api/v1/suggestions/", json=suggestion).status_code == 201
        # what needs Redis says so
        submitted = stack.post("/api/v1/runs/", json=_run_body())
        assert submitted.status_code == 503
        assert "run queue is unreachable" in submitted.json()["detail"]
        assert submitted.headers["Retry-After"] == "5"
        assert "cache unavailable, serving uncached" in stack.log("web")
    finally:
        redis_server.start()
    # and with Redis back (empty: it keeps nothing on disk), the cache fills again
    assert _cache_entries(redis_server) == 0
    for path in READS:
        assert stack.get(path).status_code == 200
    assert _cache_entries(redis_server) >= len(READS)


def test_with_postgres_restarting_requests_are_503s_and_recover_by_themselves(site):
    stack, _, postgres = site
    assert stack.get("/api/v1/works/").status_code == 200
    # when PostgreSQL stops
    postgres.stop()
    try:
        for path in ["/api/v1/works/", "/api/v1/facets/", "/", "/works/universal-transformers/"]:
            response = stack.get(path)
            assert response.status_code == 503, (path, response.text[:500])
            assert DATABASE_DOWN in response.text
        suggestion = {"work": "universal-transformers", "field": "venue"}
        suggestion |= {"proposed_value": "ICLR", "rationale": "r"}
        assert stack.post("/api/v1/suggestions/", json=suggestion).status_code == 503
    finally:
        postgres.start()
    # then the same server answers again, without a restart
    assert stack.get("/api/v1/works/").status_code == 200
    assert stack.get("/").status_code == 200


def _with_worker(stack: Stack) -> None:
    if stack.worker is None or stack.worker.poll() is not None:
        stack.start_worker()


def test_a_worker_that_kept_its_connections_serves_runs_after_postgres_restarts(site):
    stack, _, postgres = site
    _with_worker(stack)
    body = _run_body() | {"max_new_tokens": 24}  # long enough that all four overlap

    def serve(n: int) -> None:
        runs = [stack.submit(**body) for _ in range(n)]
        for run in runs:
            _, tokens, end = read_run(stack, run)
            assert end["event"] == "done", end
            assert len([t for t in tokens if t["phase"] == "generated"]) == 24
            assert stack.get(f"/api/v1/runs/{run['id']}/").json()["status"] == "done"

    # given a worker whose task threads each served a run (and kept the connection)
    serve(4)
    # when PostgreSQL restarts, which ends every kept connection
    postgres.stop()
    postgres.start()
    # then runs that take every task thread are claimed, stream and end done
    serve(4)
    assert "Traceback" not in stack.log("worker")


def test_a_run_and_its_viewer_wait_out_a_postgres_restart_mid_run(site):
    stack, _, postgres = site
    _with_worker(stack)
    waits = stack.log("worker").count("the database is unreachable")
    # given a run streaming to a viewer
    run = stack.submit(**(_run_body() | {"max_new_tokens": 150}))
    read: dict = {}

    def view() -> None:
        try:
            read["run"] = read_run(stack, run)
        except Exception as exc:  # the assertion below shows it
            read["error"] = exc

    viewer = threading.Thread(target=view)
    viewer.start()
    tokens_url = f"/api/v1/runs/{run['id']}/tokens/"
    _wait(lambda: len(stack.get(tokens_url).json()) > 20, "the run's first tokens")
    # when PostgreSQL restarts mid-run
    postgres.stop()
    time.sleep(2)
    postgres.start()
    viewer.join(timeout=120)
    # then the run goes on to its end, and the viewer gets every token in order
    assert "run" in read, read.get("error")
    _, tokens, end = read["run"]
    assert end["event"] == "done", end
    generated = [t["position"] for t in tokens if t["phase"] == "generated"]
    assert len(generated) == 150 and generated == sorted(set(generated))
    assert [t["position"] for t in tokens] == list(range(len(tokens)))
    assert len(stack.get(tokens_url).json()) == len(tokens)
    assert stack.log("worker").count("the database is unreachable") > waits  # waited out
