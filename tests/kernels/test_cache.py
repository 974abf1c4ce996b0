import pytest
import torch

from kernels.cache import DepthKVCache
from kernels.checkpoint import load_checkpoint
from kernels.engine import Engine
from kernels.rules import Fixed, QExit


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
    assert prefill.kept_cache().entries() == int(prefill.loops_computed.sum())
    records = decode_all(engine, prefill, 6)
    assert prefill.kept_cache().entries() == int(prefill.loops_computed.sum()) + sum(
        r.loops_computed for r in records
    )


def test_recompute_kv_keeps_one_projected_entry_per_early_exit(ouro_tiny, reference):
    prefill = Engine(ouro_tiny.model, QExit(0.5), "recompute-kv").prefill(reference["input_ids"])

    depths = prefill.loops_computed
    assert prefill.kept_cache().entries() == int(depths.sum()) + int((depths < 4).sum())


@pytest.mark.parametrize("q", [1.0, 0.5])
def test_byte_accounting_is_exact(ouro_tiny, reference, q):
    engine = Engine(ouro_tiny.model, QExit(q))
    prefill = engine.prefill(reference["input_ids"], reserve=20)
    decode_all(engine, prefill, 20)

    cache = prefill.kept_cache()
    assert cache.live_bytes == allocated_bytes(cache)
    assert cache.peak_bytes >= cache.live_bytes


def test_memory_follows_exit_depths_not_loops_times_length(ouro_tiny, reference):
    # given the same prompts at full depth and with early exits
    full = Engine(ouro_tiny.model, QExit(1.0)).prefill(reference["input_ids"]).kept_cache()
    early = Engine(ouro_tiny.model, QExit(0.5)).prefill(reference["input_ids"])

    # then the stored entries shrink with the average depth
    depth_ratio = float(early.loops_computed.float().mean()) / 4
    assert early.kept_cache().entries() / full.entries() == pytest.approx(depth_ratio)
    assert early.kept_cache().live_bytes < full.live_bytes


def test_loop_stores_grow_per_row_and_keep_their_entries():
    # given
    cache = _small_cache(batch=2, capacity=500)
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


def _small_cache(batch=3, capacity=40, n_loops=3, dtype=torch.float32):
    return DepthKVCache(
        n_layers=2,
        n_loops=n_loops,
        batch=batch,
        capacity=capacity,
        n_kv_heads=1,
        head_dim=2,
        dtype=dtype,
        device=torch.device("cpu"),
    )


def _entries(n, value, layers=2):
    return [torch.full((n, 1, 2), float(value + layer)) for layer in range(layers)]


def test_set_row_replaces_one_row_keeps_the_others_and_reserves_for_decoding():
    # given three rows with entries
    cache = _small_cache()
    store = cache.loop(1)
    for b, n in enumerate((5, 7, 3)):
        store.set_row(b, _entries(n, 10 * b), _entries(n, 10 * b))

    # when row 1 is replaced by 12 entries, with room for 6 more to come
    store.set_row(1, _entries(12, 100), _entries(12, 100), extra=6)

    # then the other rows keep theirs, row 1 holds only the new ones
    assert store.lens == [5, 12, 3]
    for b, (n, value) in enumerate(((5, 0), (12, 100), (3, 20))):
        for layer in range(2):
            k, v = store.row(layer, b)
            assert k.shape[1] == n
            assert torch.equal(k[0, :, 0, 0], torch.full((n,), float(value + layer)))
            assert torch.equal(v, k)
    assert store.caps[1] >= 12 + 6
    assert cache.live_bytes == allocated_bytes(cache)

    # and decoding those 6 entries into row 1 does not re-pack the store
    tensors = list(store.k)
    for i in range(6):
        store.append([1], _entries(1, 200 + i), _entries(1, 200 + i))
    assert all(a is b for a, b in zip(tensors, store.k, strict=True))
    assert store.lens == [5, 18, 3]
    assert torch.equal(store.row(0, 1)[0][0, 12:, 0, 0], torch.arange(200.0, 206.0))


def test_loop_store_regions_never_grow_past_the_cache_capacity():
    # given a cache whose rows hold at most 20 positions
    cache = _small_cache(batch=2, capacity=20)
    store = cache.loop(1)

    # when a row fills up one entry at a time
    for i in range(20):
        store.append([0], _entries(1, i), _entries(1, i))

    # then its region stopped at the capacity (no slack past what a row can hold)
    assert store.caps[0] == 20
    assert torch.equal(store.row(1, 0)[0][0, :, 0, 0], torch.arange(20.0) + 1)
    assert cache.live_bytes == allocated_bytes(cache)


def test_appends_with_the_terminal_store_stacked_by_layer(ouro_tiny, reference):
    # the terminal store is one (L, B, S, nkv, d) tensor; each layer's view is what a
    # decode step writes and what the loop stores receive on commit
    engine = Engine(ouro_tiny.model, QExit(0.5))
    prefill = engine.prefill(reference["input_ids"], reserve=4)
    cache = prefill.kept_cache()
    assert cache.e_k.shape[:2] == (ouro_tiny.config.num_hidden_layers, len(prefill.lengths))
    assert cache.e_k[0].data_ptr() == cache.e_k.data_ptr()
    before = cache.entries()
    records = decode_all(engine, prefill, 4)
    assert len(records) == 4 * len(prefill.lengths)
    assert cache.entries() == before + sum(r.loops_computed for r in records)
    assert cache.live_bytes == allocated_bytes(cache)


def test_equal_regions_are_read_as_one_batch():
    cache = _small_cache(batch=2)
    store = cache.loop(1, caps=[4, 4])
    store.set_row(0, _entries(2, 10), _entries(2, 10))
    store.set_row(1, _entries(3, 20), _entries(3, 20))

    views = store.batched(1)

    assert views is not None
    k, v = views
    assert k.shape == (2, 4, 1, 2)
    assert torch.equal(k[0, :2, 0, 0], torch.full((2,), 11.0))
    assert torch.equal(k[1, :3, 0, 0], torch.full((3,), 21.0))
    assert torch.equal(v, k)


def _prefill(n, n_loops=3, past_loop_1=(), capacity=None):
    """A one-row prefill cache of n positions: position i's entries are i (+ layer), its
    exit loop 1, or 2 for the positions in past_loop_1 (kept in a loop-1 store)."""
    cache = _small_cache(batch=1, capacity=capacity or n, n_loops=n_loops)
    for layer in range(2):
        k = (torch.arange(n, dtype=torch.float32) + layer).view(1, n, 1, 1).expand(1, n, 1, 2)
        cache.write_prefix(layer, k.contiguous(), k.contiguous())
    kept = torch.zeros(1, n, dtype=torch.bool)
    kept[0, list(past_loop_1)] = True
    cache.keep_loop(1, kept)
    cache.commit_prefill(1 + kept.to(torch.int8), [n])
    return cache


def test_a_loaded_row_takes_the_prefill_and_leaves_the_others():
    # given a two-row cache whose row 1 served an earlier request
    cache = _small_cache(batch=2, capacity=8)
    cache.load_row(0, _prefill(3, past_loop_1=[1]))
    cache.load_row(1, _prefill(6, past_loop_1=[0, 2, 4]))
    peak_before = cache.peak_bytes
    source = _prefill(4, past_loop_1=[3])

    # when row 1 takes a new request's prefill
    cache.load_row(1, source, extra=2)

    # then row 1 holds exactly that prefill: entries, exit loops, length, loop-1 entries
    assert cache.e_len == [3, 4]
    assert torch.equal(cache.e_k[1, 1, :4, 0, 0], torch.arange(4.0) + 1)
    assert torch.equal(cache.e_v[0, 1, :4, 0, 0], torch.arange(4.0))
    assert cache.exit_loop[1].tolist() == [1, 1, 1, 2, 0, 0, 0, 0]
    store = cache.loops[0]
    assert store is not None
    assert store.lens == [1, 1]
    assert torch.equal(store.row(0, 1)[0][0, :, 0, 0], torch.tensor([3.0]))
    assert store.caps[1] >= 1 + 2  # room for the tokens it will decode
    assert cache.loops[1] is None
    # and row 0 is untouched
    assert cache.exit_loop[0, :3].tolist() == [1, 2, 1]
    assert torch.equal(store.row(0, 0)[0][0, :, 0, 0], torch.tensor([1.0]))
    # and the prefill's own bytes counted toward the peak while it was held
    assert cache.peak_bytes >= max(peak_before, cache.live_bytes + source.peak_bytes)


def test_a_loaded_row_can_come_from_any_row_of_a_prefill():
    # given a prefill of two requests: row 0 with 2 positions, row 1 with 3 (one past loop 1)
    source = _small_cache(batch=2, capacity=3)
    for layer in range(2):
        k = (torch.arange(6, dtype=torch.float32) + 10 * layer).view(2, 3, 1, 1).expand(2, 3, 1, 2)
        source.write_prefix(layer, k.contiguous(), k.contiguous())
    kept = torch.tensor([[False, False, False], [False, True, False]])
    source.keep_loop(1, kept)
    source.commit_prefill(torch.tensor([[1, 1, 0], [1, 2, 1]]), [2, 3])
    cache = _small_cache(batch=2, capacity=8)

    # when
    cache.load_row(0, source, source_row=1)
    cache.load_row(1, source, source_row=0)

    # then each row holds its own request's entries, exit loops and loop-1 entries
    assert cache.e_len == [3, 2]
    assert torch.equal(cache.e_k[1, 0, :3, 0, 0], torch.tensor([13.0, 14.0, 15.0]))
    assert torch.equal(cache.e_v[0, 1, :2, 0, 0], torch.tensor([0.0, 1.0]))
    assert cache.exit_loop[0, :4].tolist() == [1, 2, 1, 0]
    store = cache.loops[0]
    assert store is not None and store.lens == [1, 0]
    assert torch.equal(store.row(1, 0)[0][0, :, 0, 0], torch.tensor([14.0]))


def test_a_loaded_row_drops_the_loop_entries_of_the_request_before():
    # given a cache whose row 0 holds loop-2 entries (and no loop-1 store)
    cache = _small_cache(batch=1, capacity=8)
    cache.loop(2).set_row(0, _entries(3, 50), _entries(3, 50))

    # when a prefill with no loop entries is loaded
    cache.load_row(0, _prefill(2))

    # then nothing of the request before is left, and no store is made for nothing
    assert cache.loops[0] is None
    assert cache.loop(2).lens == [0]
    assert cache.entries() == 2


def test_a_prompt_may_fill_the_cache_but_not_pass_it():
    cache = _small_cache(batch=1, capacity=4)

    cache.load_row(0, _prefill(4))
    assert cache.e_len == [4]

    with pytest.raises(ValueError) as refused:
        cache.load_row(0, _prefill(5))
    assert str(refused.value) == "a 5-token prompt does not fit a 4-slot cache"


def test_a_request_may_use_the_cache_loops_but_not_more():
    cache = _small_cache(batch=1, capacity=4)  # 3 loops

    cache.load_row(0, _prefill(2, n_loops=3))
    with pytest.raises(ValueError) as refused:
        cache.load_row(0, _prefill(2, n_loops=4))
    assert str(refused.value) == "a 4-loop request does not fit 3 loops"


def test_a_step_table_counts_toward_the_peak_only():
    cache = _small_cache()
    live = cache.live_bytes

    cache.note_scratch(1000)

    assert cache.peak_bytes == live + 1000
    assert cache.live_bytes == live


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_decode_steps_mask_counts_toward_the_peak_in_the_models_dtype(fixture_dir, dtype):
    # given two rows of 6 and 3 prompt positions whose tokens stop at loop 1, and the peak
    # of the prefill forgotten
    engine = Engine(load_checkpoint(fixture_dir, device="cpu", dtype=dtype).model, Fixed(1))
    prefill = engine.prefill([[5, 6, 7, 8, 9, 10], [3, 4, 5]], reserve=1)
    cache = prefill.kept_cache()
    cache.peak_bytes = live = cache.live_bytes

    # when one token per row is decoded: one step, storing nothing
    records = decode_all(engine, prefill, 1)

    # then the step held a mask of 2 rows x 7 slots (positions 0-6) in the model's dtype
    assert [(r.position, r.exit_loop) for r in records] == [(6, 1), (3, 1)]
    assert cache.live_bytes == live
    assert cache.peak_bytes == live + 2 * 7 * dtype.itemsize


def test_a_full_row_takes_no_more_tokens():
    cache = _small_cache(batch=1, capacity=4)
    cache.load_row(0, _prefill(3))

    cache.commit_token(0, loop=2)
    assert cache.e_len == [4] and cache.exit_loop[0, 3] == 2
    with pytest.raises(AssertionError, match=r"^row 0 is full \(4 slots\)$"):
        cache.commit_token(0, loop=2)


def test_loop_len_counts_a_row_entries_at_each_loop_but_the_last():
    cache = _small_cache(batch=2, capacity=8)
    cache.load_row(1, _prefill(5, past_loop_1=[0, 3]))

    assert [cache.loop_len(t, 1) for t in (1, 2, 3)] == [2, 0, 0]
    assert cache.loop_len(1, 0) == 0


def test_a_region_grows_by_a_sixteenth_and_at_least_sixteen_slots():
    cache = _small_cache(batch=1, capacity=1000)
    store = cache.loop(1)

    # a small row's region grows by 16 slots at a time
    store.append([0], _entries(1, 0), _entries(1, 0))
    tensors = list(store.k)
    for i in range(16):
        store.append([0], _entries(1, i), _entries(1, i))
    assert all(a is b for a, b in zip(tensors, store.k, strict=True))
    store.append([0], _entries(1, 0), _entries(1, 0))
    assert store.k[0] is not tensors[0]

    # a large one by a sixteenth of its entries
    store.set_row(0, _entries(320, 0), _entries(320, 0))
    tensors = list(store.k)
    for i in range(20):
        store.append([0], _entries(1, i), _entries(1, i))
    assert all(a is b for a, b in zip(tensors, store.k, strict=True))
    store.append([0], _entries(1, 0), _entries(1, 0))
    assert store.k[0] is not tensors[0]
    assert store.lens == [341]
    assert cache.live_bytes == allocated_bytes(cache)


def test_a_region_grows_no_further_than_the_row_free_positions():
    # given a row with 30 of its 40 positions taken
    cache = _small_cache(batch=1, capacity=40)
    cache.commit_prefill(torch.ones(1, 30, dtype=torch.int8), [30])
    store = cache.loop(1)

    # when it gets a loop entry, its region takes the 10 it can still need, not 16 more
    store.append([0], _entries(1, 0), _entries(1, 0))

    assert store.caps == [10]


def test_set_row_reserves_for_the_tokens_to_come_within_the_capacity():
    cache = _small_cache(batch=2, capacity=40)
    store = cache.loop(1)

    # room for 30 tokens to come, more than a growth step would give, and none for row 1
    store.set_row(0, _entries(2, 0), _entries(2, 0), extra=30)
    assert store.caps[1] == 0
    tensors = list(store.k)
    for i in range(30):
        store.append([0], _entries(1, i), _entries(1, i))
    assert all(a is b for a, b in zip(tensors, store.k, strict=True))

    # more than the capacity: only what a row can hold
    store.set_row(1, _entries(2, 0), _entries(2, 0), extra=100)
    assert store.caps[1] == 40
    assert cache.live_bytes == allocated_bytes(cache)


def test_a_half_precision_cache_loads_a_row_without_loop_entries():
    # given a float16 cache with loop-1 entries in row 0
    cache = _small_cache(batch=1, capacity=8, dtype=torch.float16)
    entries = [e.half() for e in _entries(3, 0)]
    cache.loop(1).set_row(0, entries, entries)
    source = _prefill(2)
    source.e_k, source.e_v = source.e_k.half(), source.e_v.half()
    source.dtype = torch.float16

    # when a prefill without loop entries replaces it
    cache.load_row(0, source)

    # then the row's loop entries are gone
    assert cache.loop_len(1, 0) == 0
    assert cache.entries() == 2


def test_writes_of_the_wrong_shape_or_dtype_are_refused_with_what_was_expected():
    cache = _small_cache(batch=2, capacity=4)
    k = torch.zeros(2, 3, 1, 2)

    with pytest.raises(AssertionError, match=r"^K/V \(2, 3, 1, 3\), expected \(2, 3, 1, 2\)$"):
        cache.write_prefix(0, torch.zeros(2, 3, 1, 3), torch.zeros(2, 3, 1, 3))
    with pytest.raises(AssertionError, match=r"^K/V \(2, 3, 1, 2\), expected \(2, 3, 1, 2\)$"):
        cache.write_prefix(0, k, torch.zeros(2, 3, 1, 1))
    with pytest.raises(AssertionError, match="^K/V dtype torch.float16, expected torch.float32$"):
        cache.write_prefix(0, k.half(), k.half())
    with pytest.raises(AssertionError, match="^K/V dtype torch.float32, expected torch.float32$"):
        cache.write_prefix(0, k, k.half())
    with pytest.raises(AssertionError, match="^5 positions, capacity 4$"):
        cache.write_prefix(0, torch.zeros(2, 5, 1, 2), torch.zeros(2, 5, 1, 2))
    cache.write_prefix(0, torch.zeros(2, 4, 1, 2), torch.ones(2, 4, 1, 2))
    assert torch.equal(cache.e_v[0, :, :4], torch.ones(2, 4, 1, 2))

    rows, slots, kv = torch.tensor([0, 1]), torch.tensor([1]), torch.zeros(2, 1, 2)
    with pytest.raises(AssertionError, match=r"^rows \(2,\) vs slots \(1,\)$"):
        cache.write_terminal(0, rows, slots, kv, kv)
    cache.write_terminal(1, rows, torch.tensor([3, 0]), kv + 5, kv + 6)
    assert cache.e_k[1, 0, 3, 0].tolist() == [5.0, 5.0] and cache.e_v[1, 1, 0, 0, 0] == 6


def test_commits_outside_the_cache_are_refused():
    cache = _small_cache(batch=2, capacity=4)

    with pytest.raises(AssertionError, match="^one length per row$"):
        cache.commit_prefill(torch.ones(2, 2), [2])
    with pytest.raises(AssertionError, match="^positions past capacity$"):
        cache.commit_prefill(torch.ones(2, 5), [5, 5])
    with pytest.raises(AssertionError, match="^positions past capacity$"):
        cache.commit_prefill(torch.ones(2, 2), [3, 1])
    cache.commit_prefill(torch.full((2, 2), 3), [2, 1], start=2)
    assert cache.exit_loop.tolist() == [[0, 0, 3, 3], [0, 0, 3, 3]]
    assert cache.e_len == [2, 1]

    with pytest.raises(AssertionError, match=r"^exit loop 4 outside 1\.\.3$"):
        cache.commit_token(1, loop=4)
    with pytest.raises(AssertionError, match=r"^exit loop 0 outside 1\.\.3$"):
        cache.commit_token(1, loop=0)
    cache.commit_token(1, loop=3)
    cache.commit_token(1, loop=1)
    assert cache.exit_loop[1].tolist() == [0, 3, 1, 3] and cache.e_len == [2, 3]

    with pytest.raises(AssertionError, match=r"^kept is \(B, W\) bool$"):
        cache.keep_loop(1, torch.ones(1, 2, dtype=torch.bool))
    with pytest.raises(AssertionError, match=r"^kept is \(B, W\) bool$"):
        cache.keep_loop(1, torch.ones(2, 2, dtype=torch.int8))


def test_a_row_replaced_by_as_many_entries_as_its_region_holds_is_not_re_packed():
    cache = _small_cache(batch=1, capacity=40)
    store = cache.loop(1)
    store.set_row(0, _entries(5, 0), _entries(5, 0))
    tensors = list(store.k)

    store.set_row(0, _entries(store.caps[0], 1), _entries(store.caps[0], 1))

    assert all(a is b for a, b in zip(tensors, store.k, strict=True))


def test_reloading_a_row_whose_loop_entries_fill_its_region_re_packs_nothing():
    # given a row whose 4 positions all went past loop 1, in an 8-slot cache
    cache = _prefill(4, past_loop_1=[0, 1, 2, 3], capacity=8)
    store = cache.loops[0]
    assert store is not None
    tensors = list(store.k)

    # when the next request's prefill has as many
    cache.load_row(0, _prefill(4, past_loop_1=[0, 1, 2, 3]))

    # then its entries went into the region the row had
    assert all(a is b for a, b in zip(tensors, store.k, strict=True))
    assert store.lens == [4]


def test_a_loaded_row_has_room_for_the_tokens_it_will_decode():
    cache = _small_cache(batch=1, capacity=40)

    cache.load_row(0, _prefill(4, past_loop_1=[2]), extra=30)

    store = cache.loops[0]
    assert store is not None
    tensors = list(store.k)
    for i in range(30):
        store.append([0], _entries(1, i), _entries(1, i))
    assert all(a is b for a, b in zip(tensors, store.k, strict=True))


def test_a_request_with_fewer_loops_leaves_the_deeper_stores_alone():
    # given a 3-loop cache, and a 2-loop request with a loop-1 entry
    cache = _small_cache(batch=1, capacity=8)

    cache.load_row(0, _prefill(3, n_loops=2, past_loop_1=[1]))

    # then only the loop-1 store holds it, and no loop-2 store is made
    assert cache.loop_len(1, 0) == 1
    assert cache.loops[1] is None
    assert cache.live_bytes == allocated_bytes(cache)


def test_a_store_made_from_a_prefill_holds_exactly_its_entries():
    cache = _small_cache(batch=2, capacity=6)
    kept = torch.tensor([[True, False, True, False], [False, False, False, True]])

    cache.keep_loop(1, kept)

    store = cache.loops[0]
    assert store is not None
    assert store.lens == store.caps == [2, 1]
    assert cache.live_bytes == allocated_bytes(cache)


def test_a_new_cache_holds_its_terminal_kv_a_byte_per_exit_and_no_entries() -> None:
    # given a small half-precision model's cache (2 layers, 1 head of 2 dims)
    batch, capacity, loops = 3, 10, 4
    cache = _small_cache(batch=batch, capacity=capacity, n_loops=loops, dtype=torch.float16)
    # then it holds K and V at 2 bytes, a 1-byte exit loop per slot and the rows' lengths
    kv = 2 * 2 * batch * capacity * 1 * 2 * 2  # K and V, layers, slots, heads, dims, bytes
    assert cache.live_bytes == cache.peak_bytes == kv + batch * capacity + batch * 8
    # and no entries yet, in no loop store
    assert cache.entries() == 0 and cache.loops == [None] * (loops - 1)


@pytest.mark.parametrize("policy", ["exit-kv", "first-loop-kv"])
@pytest.mark.parametrize("q", [0.5, 1.0])
def test_one_plane_policies_peak_at_the_terminal_store_whatever_the_depths(
    ouro_tiny, reference, policy, q
):
    # given a ragged batch of 16 and 9 positions with room for 6 decoded tokens each
    ids = reference["input_ids"]
    rows = [ids[0].tolist(), ids[1, :9].tolist()]
    engine = Engine(ouro_tiny.model, QExit(q), policy)
    cfg = ouro_tiny.model.config
    capacity, batch = 16 + 6, 2
    plane = cfg.num_hidden_layers * batch * capacity * cfg.kv_heads * cfg.head_size * 4
    layout = 2 * plane + batch * capacity + batch * 8  # K and V; exit loop; row lengths

    # when prefilled: the terminal store is all it holds, at every depth
    prefill = engine.prefill(rows, reserve=6)
    cache = prefill.kept_cache()

    # then one entry per position, no loop store, and the peak is that layout exactly
    assert cache.entries() == 16 + 9 and cache.loops == [None] * 3
    assert cache.live_bytes == cache.peak_bytes == layout == allocated_bytes(cache)

    # and decoding stores one entry per token, adding only each step's mask (rows x its
    # width in float32) to the peak: at most both rows at the widest step
    records = decode_all(engine, prefill, 6)
    widest = max(r.position for r in records) + 1
    assert cache.entries() == 16 + 9 + len(records) and cache.loops == [None] * 3
    assert cache.live_bytes == layout
    assert layout + widest * 4 <= cache.peak_bytes <= layout + 2 * widest * 4
    if q < 1.0:  # the same run under best-available keeps loop stores beyond that
        best = Engine(ouro_tiny.model, QExit(q)).prefill(rows, reserve=6).kept_cache()
        assert best.peak_bytes > layout


def test_exit_kv_and_first_loop_kv_see_other_kv_than_best_available(ouro_tiny, reference):
    # given early exits, so loops past a position's exit exist to be read differently
    ids = reference["input_ids"]
    outs = {
        policy: Engine(ouro_tiny.model, QExit(0.5), policy).prefill(ids).logits
        for policy in ("best-available", "exit-kv", "first-loop-kv")
    }

    # then each policy's outputs differ from the others' beyond rounding
    assert not torch.allclose(outs["exit-kv"], outs["best-available"], atol=1e-3)
    assert not torch.allclose(outs["first-loop-kv"], outs["best-available"], atol=1e-3)
    assert not torch.allclose(outs["first-loop-kv"], outs["exit-kv"], atol=1e-3)
