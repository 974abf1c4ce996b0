"""Counting device-to-host reads: on a GPU each one stalls the host until the device has
caught up, so a decode step should make as few as it can (ideally one: the stops and the
sampled tokens together).

The count wraps the tensor methods that copy values to the host (``tolist``, ``item``,
``bool(t)``, ``int(t)``, ``float(t)``, ``cpu``, ``numpy``, and ``nonzero``, whose output
size the host must learn), so it counts on any device, the CPU included, where every
tensor is already on the host: a call counts as the read it would be on a GPU. Reads
inside a counted call (``float(t)`` calling ``item``) count once. Boolean-mask indexing
also syncs on CUDA and is not counted here (``torch.cuda.set_sync_debug_mode`` sees it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

READS = ("tolist", "item", "__bool__", "__int__", "__float__", "cpu", "numpy", "nonzero")


@contextmanager
def count_host_reads() -> Iterator[list[str]]:
    """Inside, each host read appends its method's name to the yielded list."""
    reads: list[str] = []
    saved = {name: getattr(torch.Tensor, name) for name in READS}
    depth = [0]

    def counted(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if not depth[0]:
                reads.append(name)
            depth[0] += 1
            try:
                return method(self, *args, **kwargs)
            finally:
                depth[0] -= 1

        return read

    for name, method in saved.items():
        setattr(torch.Tensor, name, counted(name, method))
    try:
        yield reads
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
