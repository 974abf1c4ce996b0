"""The in-process batch service: one resident :class:`kernels.batch.ContinuousBatch` per
model, stepping in its own thread, shared by every run this worker process holds.

A Celery task thread hands its run over with :func:`batch_submit` and reads the run's
events from the returned :class:`RunHandle` as the stepping thread produces them; it still
stores and publishes them itself and checks Stop between tokens (``handle.cancel()``), so
the task blocks until its run ends and acks-late redelivery works as for a run alone. A
run's output is what it gives alone (see :mod:`kernels.batch`).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Hashable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernels.batch import ContinuousBatch
    from kernels.checkpoint import LoadedModel
    from kernels.stream import GenerationParams, TokenEvent

logger = logging.getLogger(__name__)

_END = object()  # a handle's queue item: the run has left the batch


class RunHandle:
    """One run's side of the batch: its events in order, then its summary (or error)."""

    def __init__(self, service: BatchService, key: Hashable) -> None:
        self.service, self.key = service, key
        self.items: queue.Queue[Any] = queue.Queue()
        self.summary: dict[str, Any] | None = None
        self.error: BaseException | None = None

    def __iter__(self) -> Iterator[TokenEvent]:
        """The run's events as they come; ends when it leaves the batch (raises what
        failed the batch, if anything did)."""
        while (item := self.items.get()) is not _END:
            yield item
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        """The run leaves at the next step; iteration ends soon after."""
        self.service.cancel(self.key)


class BatchService:
    """A model's batch and the daemon thread that steps it while it has runs."""

    def __init__(
        self, loaded: LoadedModel, max_rows: int, torch_threads: int = 0, prefill_chunk: int = 0
    ) -> None:
        from kernels.batch import PREFILL_CHUNK, ContinuousBatch

        self.torch_threads = torch_threads
        self.batch: ContinuousBatch = ContinuousBatch(
            loaded, max_rows=max_rows, prefill_chunk=prefill_chunk or PREFILL_CHUNK
        )
        self.handles: dict[Hashable, RunHandle] = {}
        self.wake = threading.Condition()
        self.thread = threading.Thread(target=self._serve, name="batch-step", daemon=True)
        self.thread.start()

    def submit(self, key: Hashable, prompt: str, params: GenerationParams) -> RunHandle:
        """Queue a run (ValueError names a bad request; nothing is queued then)."""
        handle = RunHandle(self, key)
        with self.wake:
            self.batch.add(key, prompt, params)
            self.handles[key] = handle
            self.wake.notify()
        return handle

    def cancel(self, key: Hashable) -> None:
        with self.wake:
            self.batch.cancel(key)
            self.wake.notify()

    def _serve(self) -> None:
        torch_threads_pin(self.torch_threads)
        while True:
            with self.wake:
                self.wake.wait_for(lambda: self.batch.busy)
                try:
                    updates = self.batch.step()
                except Exception as exc:  # every run in the batch fails with the reason
                    logger.exception("batch step failed")
                    self._fail_all(exc)
                    continue
                for key, update in updates.items():
                    handle = self.handles[key]
                    for event in update.events:
                        handle.items.put(event)
                    if update.summary is not None:
                        handle.summary = update.summary
                        handle.items.put(_END)
                        del self.handles[key]

    def _fail_all(self, exc: BaseException) -> None:
        for key, handle in list(self.handles.items()):
            self.batch.cancel(key)
            handle.error = exc
            handle.items.put(_END)
        self.handles.clear()
        self.batch.step()  # the cancelled runs leave; their rows are free again


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
) -> RunHandle:
    """Hand a run to this process's batch for ``loaded`` (created on first use, its
    stepping thread on ``torch_threads`` intra-op threads; 0 leaves torch's default;
    ``prefill_chunk`` prompt positions per step, 0 the batch's default)."""
    with _LOCK:
        service = _SERVICES.get(id(loaded))
        if service is None or service.batch.loaded is not loaded:
            service = BatchService(loaded, max_rows, torch_threads, prefill_chunk)
            _SERVICES[id(loaded)] = service
    return service.submit(key, prompt, params)
