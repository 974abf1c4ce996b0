"""A real playground stack in subprocesses, as deployed: uvicorn serving the ASGI app and
a Celery worker (one process; its task threads share one batch) on queue ``gpu``, sharing
a database and a broker.

Used by the end-to-end tests of both modes: the full stack (Redis broker and streams)
and the embedded one (a SQLite broker file, events through the database).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from playground.recording import event_storable

ROOT = Path(settings.BASE_DIR)
TINY = ROOT / "tests" / "kernels" / "fixtures" / "ouro-tiny"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url_of(database: Mapping[str, Any]) -> str:
    """A DATABASE_URL naming the (test) database the suite is using, for PostgreSQL."""
    user, password = database.get("USER") or "", database.get("PASSWORD") or ""
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host, port = database.get("HOST") or "127.0.0.1", database.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{database['NAME']}"


def suite_stack(workdir: Path, *, redis_url: str = "") -> Stack:
    """A stack on the suite's database: its PostgreSQL test database, or a migrated SQLite
    file of its own in ``workdir`` (the suite's in-memory SQLite is not shared)."""
    if settings.USING_POSTGRES:
        database_url = database_url_of(settings.DATABASES["default"])
        return Stack(workdir, database_url=database_url, redis_url=redis_url)
    stack = Stack(workdir, database_url=f"sqlite:///{workdir / 'db.sqlite3'}", redis_url=redis_url)
    stack.manage("migrate", "--noinput")
    return stack


class Stack:
    def __init__(self, workdir: Path, *, database_url: str, redis_url: str = "") -> None:
        self.workdir = workdir
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.worker_name = f"e2e-{os.getpid()}-{self.port}@localhost"
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "TEST_", "PLAYGROUND_", "CELERY_", "REDIS_"))
        } | {
            "DJANGO_SETTINGS_MODULE": "loopatlas.settings.base",
            "DEBUG": "1",
            "PYTHONUNBUFFERED": "1",
            "DATABASE_URL": database_url,
            "LOOPATLAS_VAR_DIR": str(workdir),
            "PLAYGROUND_MODELS": f"ouro-tiny={TINY}",
            "PLAYGROUND_TOKEN_DELAY_S": "0.02",  # a floor under each token: runs last a while
            "PLAYGROUND_STALE_AFTER_S": "6",
            "PLAYGROUND_SSE_HEARTBEAT_S": "1",
            "PLAYGROUND_BATCH": "4",  # as many rows as the worker has task threads
            # Every test submits from 127.0.0.1: a rate no test reaches, and room for a
            # run a previous test left finishing.
            "PLAYGROUND_VISITOR_SUBMITS": "1000/minute",
            "PLAYGROUND_VISITOR_ACTIVE": "5",
        }
        if redis_url:
            self.env["REDIS_URL"] = redis_url
        self.web: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None
        self.worker_starts = 0

    def manage(self, *args: str) -> None:
        subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            timeout=180,
        )

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 (kept by the process)
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: kill_worker takes it whole
        )

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start_worker(self) -> None:
        self.worker_starts += 1
        marker = f"{self.worker_name} ready."
        seen = self.log("worker").count(marker)
        self.worker = self._spawn(
            "worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "workers",
                "worker",
                "-Q",
                "gpu",
                "--pool",
                "threads",
                "--concurrency",
                self.env["PLAYGROUND_BATCH"],
                "--prefetch-multiplier",
                "1",
                "-n",
                self.worker_name,
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
        )
        self._wait(lambda: self.log("worker").count(marker) > seen, "worker", self.worker)

    def start_web(self) -> None:
        self.web = self._spawn(
            "web",
            [
                sys.executable,
                "-m",
                "uvicorn",
                "loopatlas.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--no-proxy-headers",  # as deployed: the address is NUM_PROXIES's to find
            ],
        )

        def up() -> bool:
            try:
                return httpx.get(f"{self.base}/api/v1/runs/models/", timeout=2).is_success
            except httpx.HTTPError:
                return False

        self._wait(up, "web", self.web)

    def _wait(self, ready, name: str, process: subprocess.Popen, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {name} did not start:\n{self.log(name)[-4000:]}")
            time.sleep(0.2)

    def start(self) -> Stack:
        self.start_worker()
        self.start_web()
        return self

    def kill_worker(self) -> None:
        """SIGKILL the worker's whole process group: no handler, no cleanup."""
        assert self.worker is not None
        os.killpg(self.worker.pid, signal.SIGKILL)
        self.worker.wait(timeout=30)

    def stop(self) -> None:
        for process in (self.web, self.worker):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in (self.web, self.worker):
            if process is None:
                continue
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)

    # The client side, as a page would use it.

    def submit(self, **body) -> dict:
        response = self.submit_response(**body)
        assert response.status_code == 201, response.text
        return response.json()

    def submit_response(self, *, client: httpx.Client | None = None, **body) -> httpx.Response:
        """A submit as ``client`` (another source address, say) or a fresh connection."""
        if client is not None:
            return client.post(f"{self.base}/api/v1/runs/", json=body, timeout=30)
        return httpx.post(f"{self.base}/api/v1/runs/", json=body, timeout=30)

    def get(self, path: str, **kwargs) -> httpx.Response:
        return httpx.get(f"{self.base}{path}", timeout=30, **kwargs)

    def post(self, path: str, **kwargs) -> httpx.Response:
        return httpx.post(f"{self.base}{path}", timeout=30, **kwargs)

    def events(self, run: dict, *, last_event_id: int | None = None) -> Iterator[dict]:
        """The run's SSE events as dicts (``event``, ``id``, ``data``; ``comment`` for
        pings) until the stream closes; break out of the loop to disconnect."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        timeout = httpx.Timeout(60, read=30)
        with httpx.stream(
            "GET", self.base + run["events_url"], headers=headers, timeout=timeout
        ) as r:
            assert r.status_code == 200, r.read()
            assert r.headers["content-type"].startswith("text/event-stream")
            yield from parse_sse(r.iter_lines())


def parse_sse(lines: Iterator[str]) -> Iterator[dict]:
    event: dict = {}
    for line in lines:
        if line == "":
            if event:
                if "data" in event:
                    event["data"] = json.loads(event["data"])
                yield event
            event = {}
        elif line.startswith(":"):
            yield {"comment": line[1:].strip()}
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data" and "data" in event:
                event["data"] += "\n" + value
            else:
                event[field] = value


COMPARED = ("position", "phase", "token_id", "text", "exit_loop", "loops_computed")


def token_view(events: list[dict]) -> list[tuple]:
    """What must agree between the stream, the stored records and the engine (whose
    texts are compared as stored: NUL shown as ␀)."""
    return [tuple(event_storable(event[key]) for key in COMPARED) for event in events]


def read_run(stack: Stack, run: dict, **kwargs) -> tuple[dict, list[dict], dict]:
    """Read a run's stream to its end: (the ``run`` event, token events, the final event)."""
    first, tokens, end = None, [], None
    for event in stack.events(run, **kwargs):
        if "comment" in event:
            continue
        if first is None:
            first = event
        elif event["event"] == "token":
            assert int(event["id"]) == event["data"]["position"]
            tokens.append(event["data"])
        else:
            end = event
    assert first is not None and first["event"] == "run"
    assert end is not None, "the stream closed without done/error"
    return first, tokens, end
