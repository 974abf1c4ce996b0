"""The in-process batch service: one resident :class:`kernels.batch.ContinuousBatch` per
model, stepping in its own thread, shared by every run this worker process holds.

A Celery task thread hands its run over with :func:`batch_submit` and reads the run's
events from the returned :class:`RunHandle` as the stepping thread produces them; it still
stores and publishes them itself and checks Stop between tokens (``handle.cancel()``), so
the task blocks until its run ends and acks-late redelivery works as for a run alone. A
run's output is what it gives alone (see :mod:`kernels.batch`).

Only the stepping thread touches the batch's state. Submits and cancels go into an inbox
that it applies between steps, so they never wait for a step (a submit validates its
request in the calling thread, so a bad one still fails there). What one run's own work
raises in a step (its sampling, its events, its prefill) ends that run's handle with the
error, and the others go on (see :mod:`kernels.batch`). Only a failure of the shared
decode step itself, which no one row owns, fails every run in the batch with the reason;
the thread then goes on with a fresh batch for later runs. Celery's time limits do not
reach a run in a ``--pool threads`` worker, so the batch enforces each run's own
wall-clock limit: a run past it leaves the batch and its handle raises
:class:`RunTimeLimitExceeded`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernels.batch import ContinuousBatch, RunUpdate
    from kernels.checkpoint import LoadedModel
    from kernels.report import TokenEvent
from kernels.request import GenerationParams

logger = logging.getLogger(__name__)

_END = object()  # a handle's queue item: the run has left the batch
RETRY_AFTER_S = 1.0  # pause of the stepping thread after a failure it could not clean up


class RunTimeLimitExceeded(Exception):
    """A run was still in the batch past its wall-clock limit."""


class RunHandle:
    """One run's side of the batch: its events in order, then its summary (or error)."""

    def __init__(
        self, service: BatchService, key: Hashable, deadline: float | None, limit_s: float = 0
    ) -> None:
        self.service, self.key = service, key
        self.deadline, self.limit_s = deadline, limit_s  # time.monotonic() seconds
        self.items: queue.Queue[Any] = queue.Queue()
        self.summary: dict[str, Any] | None = None
        self.error: BaseException | None = None

    def __iter__(self) -> Iterator[TokenEvent]:
        """The run's events as they come; ends when it leaves the batch (raises what
        failed it, if anything did)."""
        while (item := self.items.get()) is not _END:
            yield item
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        """The run leaves at the next step; iteration ends soon after."""
        self.service.cancel(self.key)

    def end(self, error: BaseException | None = None) -> None:
        """The run has left the batch (with ``error``, if it failed)."""
        self.error = error
        self.items.put(_END)


class BatchService:
    """A model's batch and the daemon thread that steps it while it has runs."""

    def __init__(
        self,
        loaded: LoadedModel,
        max_rows: int,
        torch_threads: int = 0,
        prefill_chunk: int = 0,
    ) -> None:
        self.loaded, self.max_rows, self.prefill_chunk = loaded, max_rows, prefill_chunk
        self.torch_threads = torch_threads
        self.batch = self._new_batch()
        self.handles: dict[Hashable, RunHandle] = {}  # every run submitted and not ended
        self.inbox: deque[Callable[[ContinuousBatch], None]] = deque()  # adds and cancels
        self.wake = threading.Condition()  # guards handles and inbox, never a step
        self.thread = threading.Thread(target=self._serve, name="batch-step", daemon=True)
        self.thread.start()

    def _new_batch(self) -> ContinuousBatch:
        from kernels.batch import PREFILL_CHUNK, ContinuousBatch

        chunk = self.prefill_chunk or PREFILL_CHUNK
        return ContinuousBatch(self.loaded, max_rows=self.max_rows, prefill_chunk=chunk)

    def submit(
        self, key: Hashable, prompt: str, params: GenerationParams, time_limit_s: float = 0
    ) -> RunHandle:
        """Queue a run that ends past ``time_limit_s`` seconds from now (0: no limit).
        ValueError names a bad request; nothing is queued then."""
        run = self.batch.prepare(key, prompt, params)
        deadline = time.monotonic() + time_limit_s if time_limit_s > 0 else None
        handle = RunHandle(self, key, deadline, time_limit_s)
        with self.wake:
            if key in self.handles:
                raise ValueError(f"request {key!r} is already in the batch")
            self.handles[key] = handle
            self.inbox.append(lambda batch: batch.admit(run))
            self.wake.notify()
        return handle

    def cancel(self, key: Hashable) -> None:
        with self.wake:
            self.inbox.append(lambda batch: batch.cancel(key))
            self.wake.notify()

    def _serve(self) -> None:
        torch_threads_pin(self.torch_threads)
        while True:
            try:
                self._serve_once()
            except Exception:  # a failure while cleaning up a failed step: start afresh
                logger.exception("batch cleanup failed")
                time.sleep(RETRY_AFTER_S)

    def _serve_once(self) -> None:
        """Apply the inbox, end runs past their limit, run one step and hand out its
        updates (each joined run's prompt events before the step's decode)."""
        with self.wake:
            self.wake.wait_for(lambda: bool(self.inbox) or self.batch.busy)
            inbox, self.inbox = self.inbox, deque()
        for apply in inbox:
            apply(self.batch)
        self._end_overdue()
        try:
            # a joined run's prompt events go out as soon as its prefill is done, not
            # after the other joiners' prefills and the step's decode
            for joined in self.batch.joins():
                self._deliver(joined)
            updates = self.batch.decode()
        except Exception as exc:  # the shared step: every run in the batch fails with it
            logger.exception("batch step failed")
            self._fail_all(exc)
            return
        self._deliver(updates)

    def _end_overdue(self) -> None:
        now = time.monotonic()
        with self.wake:
            overdue = [
                (key, handle)
                for key, handle in self.handles.items()
                if handle.deadline is not None and now > handle.deadline
            ]
            for key, _ in overdue:
                del self.handles[key]
        for key, handle in overdue:
            self.batch.cancel(key)  # it leaves at this step; its summary is not read
            handle.end(RunTimeLimitExceeded(f"it ran past the {handle.limit_s:g} s time limit"))

    def _deliver(self, updates: dict[Hashable, RunUpdate]) -> None:
        for key, update in updates.items():
            with self.wake:
                handle = self.handles.get(key)
                if handle is not None and update.left:
                    del self.handles[key]
            if handle is None:  # ended already (failed or past its limit)
                self.batch.cancel(key)
                continue
            for event in update.events:
                handle.items.put(event)
            if update.error is not None:  # its own work raised: it alone fails
                handle.end(update.error)
            elif update.summary is not None:
                handle.summary = update.summary
                handle.end()

    def _fail_all(self, exc: BaseException) -> None:
        """Every run of the failed batch ends with ``exc``; runs still in the inbox go on
        in a fresh batch (the failed one's state is not trusted again)."""
        with self.wake:
            failed = [key for key in self.handles if key in self.batch.runs]
            handles = [self.handles.pop(key) for key in failed]
        for handle in handles:
            handle.end(exc)
        self.batch = self._new_batch()


def torch_threads_pin(threads: int) -> None:
    """Pin torch's intra-op threads for the calling thread (0: leave the default). With
    OpenMP the count is per thread, so a task thread and the stepping thread each pin
    their own, or each starts one per core and stalls on a shared CPU."""
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


_LOCK = threading.Lock()
_SERVICES: dict[int, BatchService] = {}


def batch_submit(
    loaded: LoadedModel,
    key: Hashable,
    prompt: str,
    params: GenerationParams,
    *,
    max_rows: int,
    torch_threads: int = 0,
    prefill_chunk: int = 0,
    time_limit_s: float = 0,
) -> RunHandle:
    """Hand a run to this process's batch for ``loaded`` (created on first use, its
    stepping thread on ``torch_threads`` intra-op threads; 0 leaves torch's default;
    ``prefill_chunk`` prompt positions per step, 0 the batch's default; each run ends
    past ``time_limit_s`` seconds, 0 for no limit)."""
    with _LOCK:
        service = _SERVICES.get(id(loaded))
        if service is None or service.loaded is not loaded:
            service = BatchService(loaded, max_rows, torch_threads, prefill_chunk)
            _SERVICES[id(loaded)] = service
    return service.submit(key, prompt, params, time_limit_s)
