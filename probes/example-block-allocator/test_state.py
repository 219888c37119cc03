"""State probes for prefix caching: reference counts, the free pool and the cache index
must stay consistent with the live block tables across long mixed workloads, failed
allocations and evictions."""
# INFRADEV-PROBE-CANARY-9f2c4e7a1b

import random
import zlib

import pytest

from infradev_probe import subject

minicache = subject.module("minicache")


def _import_now():
    """Imports minicache in the subject at collection, so that no test's measurement
    includes the import. Tests reach every name through the module proxy, which re-imports
    in a new subject after a crash: a handle kept from an earlier subject would be stale."""
    try:
        subject.describe(minicache)
    except Exception:
        pass  # the tests meet the error again and report it


_import_now()

PROBE_SECRET = "PROBE-SECRET-state-5d1e8c20"
SEED = zlib.crc32(PROBE_SECRET.encode())  # fixed: the workload is the same on every run


class _State:
    """What the allocator reports, read in the same batch (one round trip) as the step that
    changed it: the block table and token count of each named sequence, every block's
    ref_count and num_free_blocks. Each item holds a value or the subject's error."""

    def __init__(self, b, alloc, seq_ids, num_blocks):
        self.tables = {seq_id: b.call(alloc.get_block_table, seq_id) for seq_id in seq_ids}
        self.counts = {seq_id: b.call(alloc.num_tokens, seq_id) for seq_id in seq_ids}
        self.refs = [b.call(alloc.ref_count, block) for block in range(num_blocks)]
        self.free = b.call(alloc.num_free_blocks)

    def table(self, seq_id):
        return self.tables[seq_id].value


def _check_consistent(state, live, num_blocks, bs):
    """ref_count(b) equals the number of live block tables holding b; free + in-use blocks
    partition the pool; a block shared by two tables holds the same prefix in both. Every
    value is checked here, in the judge."""
    holders = {}
    content = {}
    for seq_id, tokens in live.items():
        table = state.table(seq_id)
        assert len(table) == -(-len(tokens) // bs), f"sequence {seq_id}: wrong table length"
        assert state.counts[seq_id].value == len(tokens)
        for k, block in enumerate(table):
            holders[block] = holders.get(block, 0) + 1
            end = (k + 1) * bs
            key = tuple(tokens[:end]) if end <= len(tokens) else ("partial", seq_id)
            if block in content:
                assert content[block] == key, f"block {block} shared by sequences with different prefixes"
            content[block] = key
    for block in range(num_blocks):
        count = state.refs[block].value
        assert count == holders.get(block, 0), (
            f"ref_count({block}) is {count} but {holders.get(block, 0)} "
            f"live block tables hold it")
    free = state.free.value
    assert free == num_blocks - len(holders), (
        f"{free} free + {len(holders)} in use != {num_blocks} blocks")


def test_refcounts_balance_across_steps():
    """Requirement: after any sequence of allocate / append_tokens / free calls, including
    ones that fail with NoFreeBlocksError, every block's ref_count equals the number of live
    sequences holding it, no block is both free and in use, shared blocks hold identical
    prefixes, and freeing everything restores the initial state exactly.

    The official tests check reference counts only in short, successful, hand-written
    scenarios; they never mix sharing with a full pool, failed allocations and eviction."""
    rng = random.Random(SEED)
    bs = 4
    n = 32
    NoFreeBlocksError = minicache.NoFreeBlocksError
    alloc = minicache.BlockAllocator(num_blocks=n, block_size=bs)
    assert (alloc.num_blocks, alloc.block_size) == (n, bs)
    prefixes = [[rng.randrange(1000) for _ in range(12)] for _ in range(3)]
    recent = []
    live = {}
    next_id = 0
    failures = 0
    with subject.batch() as b:
        state = _State(b, alloc, [], n)
    _check_consistent(state, live, n, bs)
    for _ in range(3000):
        before = state
        op = rng.random()
        # Each step is one round trip: the call, then everything _check_consistent reads.
        if op < 0.45 or not live:
            if recent and rng.random() < 0.2:
                prompt = list(rng.choice(recent))
            else:
                prompt = rng.choice(prefixes)[: rng.choice((0, 4, 8, 12))]
                prompt += [rng.randrange(1000) for _ in range(rng.randint(1, 10))]
            with subject.batch() as b:
                step = b.call(alloc.allocate, next_id, prompt)
                state = _State(b, alloc, [*live, next_id], n)
            if not step.ok and isinstance(step.error, NoFreeBlocksError):
                failures += 1
                assert state.free.value == before.free.value
                with pytest.raises(KeyError):
                    state.table(next_id)
            else:
                assert step.value == state.table(next_id)
                live[next_id] = prompt
                recent = (recent + [prompt])[-16:]
            next_id += 1
        elif op < 0.75:
            seq_id = rng.choice(sorted(live))
            extra = [rng.randrange(1000) for _ in range(rng.randint(1, 6))]
            table = before.table(seq_id)
            with subject.batch() as b:
                step = b.call(alloc.append_tokens, seq_id, extra)
                state = _State(b, alloc, live, n)
            if not step.ok and isinstance(step.error, NoFreeBlocksError):
                failures += 1
                assert state.table(seq_id) == table
                assert state.free.value == before.free.value
            else:
                assert table + step.value == state.table(seq_id), (
                    "append_tokens must return exactly the blocks it added")
                live[seq_id] = live[seq_id] + extra
        else:
            seq_id = rng.choice(sorted(live))
            with subject.batch() as b:
                step = b.call(alloc.free, seq_id)
                gone = b.call(alloc.get_block_table, seq_id)
                del live[seq_id]
                state = _State(b, alloc, live, n)
            step.value  # raises the subject's error, if free raised
            with pytest.raises(KeyError):
                gone.value
        _check_consistent(state, live, n, bs)
    assert failures > 200  # the workload really exercises the full-pool paths
    with subject.batch() as b:
        for seq_id in sorted(live):
            b.call(alloc.free, seq_id)
        state = _State(b, alloc, [], n)
    b.results
    _check_consistent(state, {}, n, bs)
    assert state.free.value == n


def test_failed_allocation_leaves_shared_blocks_alone():
    """Requirement: an allocation that fails with NoFreeBlocksError changes nothing, even
    when its prompt hits cached blocks: those blocks keep their reference counts, and an
    evictable hit stays free and evictable.

    The official atomicity test predates prefix caching: its failing prompt has no cached
    prefix, so an implementation that pins the prefix blocks before checking capacity (and
    never unpins them) passes it."""
    rng = random.Random(SEED + 1)
    system = [rng.randrange(1000) for _ in range(8)]
    alloc = minicache.BlockAllocator(num_blocks=6, block_size=4)
    table = alloc.allocate(0, system + [1])  # 3 blocks, 2 of them cacheable
    with pytest.raises(minicache.NoFreeBlocksError):
        alloc.allocate(1, system + list(range(100, 120)))  # 2 hits + 5 fresh > 3 free
    assert [alloc.ref_count(b) for b in table] == [1, 1, 1]
    assert alloc.num_free_blocks() == 3
    alloc.free(0)
    assert alloc.num_free_blocks() == 6
    # The same with the prefix cached but unreferenced (evictable).
    with pytest.raises(minicache.NoFreeBlocksError):
        alloc.allocate(2, system + list(range(200, 228)))  # 2 hits + 7 fresh > 6 free
    assert all(alloc.ref_count(b) == 0 for b in range(6))
    assert alloc.num_free_blocks() == 6
    assert alloc.allocate(3, system + [5])[:2] == table[:2]
    assert alloc.num_cached_tokens(3) == 8


def test_reused_block_becomes_most_recently_freed():
    """Requirement: eviction is least-recently-*freed* first, and a cached block that was
    reused and freed again counts as freed at that later time.

    The official eviction test frees each block exactly once, so it cannot tell "LRU by last
    free" from "FIFO by first registration"."""
    alloc = minicache.BlockAllocator(num_blocks=3, block_size=4)
    (a,) = alloc.allocate(0, [1, 2, 3, 4])
    alloc.free(0)
    (b,) = alloc.allocate(1, [5, 6, 7, 8])
    alloc.free(1)
    assert alloc.allocate(2, [1, 2, 3, 4]) == [a]  # reuse a, then free it again: now newest
    alloc.free(2)
    (c,) = alloc.allocate(3, [9, 10, 11, 12])  # the never-used block
    assert c not in (a, b)
    assert alloc.allocate(4, [13, 14, 15, 16]) == [b]  # b is the least recently freed
    assert alloc.allocate(5, [1, 2, 3, 4]) == [a]
    assert alloc.num_cached_tokens(5) == 4


def test_evicted_blocks_are_forgotten():
    """Requirement: once a cached block is evicted and reused for other tokens, its old
    content must no longer produce cache hits (the hash index forgets it), and a block
    that was evicted by append_tokens is handled the same way.

    The official tests check which block is evicted, never that the evicted content is
    gone from the index; a stale index entry hands one sequence another's KV data."""
    alloc = minicache.BlockAllocator(num_blocks=3, block_size=4)
    a = alloc.allocate(0, [1, 2, 3, 4, 5, 6, 7, 8])
    alloc.free(0)  # a[1] freed first: evicted first
    alloc.allocate(1, [40, 41])  # takes the never-used block
    (new,) = alloc.append_tokens(1, [42, 43, 44])  # needs a second block: evicts a[1]
    assert new == a[1]
    # Only a[0] is free: reviving it plus one fresh block for [5..8] does not fit. A stale
    # index entry for a[1] would "hit" the block sequence 1 now writes into instead.
    with pytest.raises(minicache.NoFreeBlocksError):
        alloc.allocate(2, [1, 2, 3, 4, 5, 6, 7, 8])
    alloc.free(1)
    table = alloc.allocate(3, [1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert alloc.num_cached_tokens(3) == 4
    assert table[0] == a[0]
    assert len(set(table)) == 3
    assert [alloc.ref_count(b) for b in table] == [1, 1, 1]
