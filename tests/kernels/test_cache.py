import pytest
import torch

from kernels.cache import DepthKVCache
from kernels.engine import Engine
from kernels.rules import QExit


def allocated_bytes(cache: DepthKVCache) -> int:
    """Bytes of every tensor the cache holds, counted from the tensors themselves."""
    tensors = [*cache.e_k, *cache.e_v, cache.exit_loop]
    stores = [s for s in cache.loops if s is not None]
    for store in stores:
        tensors += [*store.k, *store.v]
    tables = cache.batch * 8 * (1 + 3 * len(stores))  # e_len; offsets, caps, lens per store
    return sum(t.numel() * t.element_size() for t in tensors) + tables


def decode_all(engine, prefill, n):
    return list(engine.decode(prefill, max_new_tokens=n))


@pytest.mark.parametrize("policy", ["best-available", "select"])
def test_entries_are_the_sum_of_compute_depths(ouro_tiny, reference, policy):
    # given
    engine = Engine(ouro_tiny.model, QExit(0.5), policy)
    prefill = engine.prefill(reference["input_ids"], reserve=6)

    # then after prefill and after decoding
    assert prefill.cache.entries() == int(prefill.loops_computed.sum())
    records = decode_all(engine, prefill, 6)
    assert prefill.cache.entries() == int(prefill.loops_computed.sum()) + sum(
        r.loops_computed for r in records
    )


def test_recompute_kv_keeps_one_projected_entry_per_early_exit(ouro_tiny, reference):
    prefill = Engine(ouro_tiny.model, QExit(0.5), "recompute-kv").prefill(reference["input_ids"])

    depths = prefill.loops_computed
    assert prefill.cache.entries() == int(depths.sum()) + int((depths < 4).sum())


@pytest.mark.parametrize("q", [1.0, 0.5])
def test_byte_accounting_is_exact(ouro_tiny, reference, q):
    engine = Engine(ouro_tiny.model, QExit(q))
    prefill = engine.prefill(reference["input_ids"], reserve=20)
    decode_all(engine, prefill, 20)

    cache = prefill.cache
    assert cache.live_bytes == allocated_bytes(cache)
    assert cache.peak_bytes >= cache.live_bytes


def test_memory_follows_exit_depths_not_loops_times_length(ouro_tiny, reference):
    # given the same prompts at full depth and with early exits
    full = Engine(ouro_tiny.model, QExit(1.0)).prefill(reference["input_ids"]).cache
    early = Engine(ouro_tiny.model, QExit(0.5)).prefill(reference["input_ids"])

    # then the stored entries shrink with the average depth
    depth_ratio = float(early.loops_computed.float().mean()) / 4
    assert early.cache.entries() / full.entries() == pytest.approx(depth_ratio)
    assert early.cache.live_bytes < full.live_bytes


def test_loop_stores_grow_per_row_and_keep_their_entries():
    # given
    cache = DepthKVCache(
        n_layers=2,
        n_loops=3,
        batch=2,
        capacity=500,
        n_kv_heads=1,
        head_dim=2,
        dtype=torch.float32,
        device=torch.device("cpu"),
    )
    store = cache.loop(1)

    # when row 0 gets 100 entries and row 1 gets 10 (ragged rows)
    for i in range(100):
        rows = [0, 1] if i < 10 else [0]
        entry = [torch.full((len(rows), 1, 2), float(i + layer)) for layer in range(2)]
        store.append(rows, entry, entry)

    # then
    assert store.lens == [100, 10]
    k, _ = store.row(1, 0)
    assert torch.equal(k[0, :, 0, 0], torch.arange(100.0) + 1)
    assert torch.equal(store.row(0, 1)[0][0, :, 0, 0], torch.arange(10.0))
    assert store.caps[1] < 40  # a short row's region stays short
    assert store.batched(0) is None
    assert cache.live_bytes == allocated_bytes(cache)
    assert cache.peak_bytes > cache.live_bytes  # re-packing held old and new at once
