"""State probes for the LRU offloading manager: ref-count-protected eviction, recency
order, all-or-nothing prepare_store, failed stores, and a long seeded random workload
checked step by step against an independent model of the documented semantics."""
# INFRADEV-PROBE-CANARY-dbb67ff107ab

import random
import zlib

import numpy as np

from infradev_probe import subject, subject_op, workload_seed

from _model import ModelManager

cpu = subject.module("vllm.v1.kv_offload.backends.cpu")
lru_manager = subject.module("vllm.v1.kv_offload.lru_manager")
mediums = subject.module("vllm.v1.kv_offload.mediums")
builtins = subject.module("builtins")  # the subject's, for isinstance where the spec lives


def _import_now():
    """Imports the modules in the subject at collection, so that no test's measurement
    includes the import. Tests reach every name through the module proxies, which re-import
    in a new subject after a crash: a handle kept from an earlier subject would be stale."""
    for module in (cpu, lru_manager, mediums):
        try:
            subject.describe(module)
        except Exception:
            pass  # the tests meet the error again and report it


_import_now()

PROBE_SECRET = "PROBE-SECRET-kvoffload-state-d9f32ddb5efe"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)
BLOCK_SIZE = 16


def H(*ints):
    """Block hashes as the scheduler produces them: opaque bytes values."""
    return [zlib.crc32(PROBE_SECRET.encode() + str(i).encode()).to_bytes(4, "big") + bytes([i % 251])
            for i in ints]


def _ids(spec):
    """The block ids of a spec handle (one round trip), checked to be a CPULoadStoreSpec
    with an int64 numpy array."""
    with subject.batch() as b:
        is_cpu = b.call(builtins.isinstance, spec, mediums.CPULoadStoreSpec)
        block_ids = b.getattr(spec, "block_ids")
    assert is_cpu.value is True
    block_ids = block_ids.value
    assert isinstance(block_ids, np.ndarray) and block_ids.dtype == np.int64
    return block_ids.tolist()


def _unpack(out):
    """(block_hashes_to_store, block_hashes_evicted, CPU block ids) of a PrepareStoreOutput."""
    with subject.batch() as b:
        new = b.getattr(out, "block_hashes_to_store")
        evicted = b.getattr(out, "block_hashes_evicted")
        spec = b.getattr(out, "store_spec")
    return list(new.value), list(evicted.value), _ids(spec.value)


def _mk(num_blocks, events=True):
    backend = cpu.CPUBackend(block_size=BLOCK_SIZE, num_blocks=num_blocks)
    return backend, lru_manager.LRUOffloadingManager(backend, enable_events=events)


def _events(mgr):
    """take_events(), each event as (removed, block_hashes). take_events() returns an iterable
    living in the subject (a generator): its items are listed there (iteration of a handle is
    not forwarded)."""
    events = subject_op(mgr.take_events(), "__iter__")
    with subject.batch() as b:
        items = [(b.getattr(e, "removed"), b.getattr(e, "block_hashes")) for e in events]
    return [(removed.value, list(hashes.value)) for removed, hashes in items]


def _store(mgr, hashes):
    out = mgr.prepare_store(hashes)
    assert out is not None
    mgr.complete_store(out.block_hashes_to_store)
    return out


def test_random_workload_matches_model():
    """Requirement: across 4000 seeded prepare_store / complete_store (success or failure) /
    prepare_load / complete_load / touch / lookup / take_events steps on a 24-block CPU
    backend with concurrent in-flight stores and loads, every return value (hashes to
    store, evicted hashes in order, CPU block ids, lookup hit counts, load block ids), the
    backend's free-block count and the event stream equal an independent model of the
    documented semantics; replaying the events gives exactly the set of ready blocks."""
    rng = random.Random(SEED)
    num_blocks = 24
    backend, mgr = _mk(num_blocks)
    model = ModelManager(num_blocks, BLOCK_SIZE)
    universe = H(*range(60))
    stores_in_flight = []
    loads_in_flight = []
    replay = set()
    for step in range(4000):
        op = rng.random()
        # Each step is one batch (the call, then the backend's free count); a prepare_store
        # or prepare_load result is then read with one or two more round trips.
        if op < 0.30:
            k = rng.randint(1, 8)
            hashes = rng.sample(universe, k)
            with subject.batch() as b:
                got = b.call(mgr.prepare_store, hashes)
                free = b.call(backend.get_num_free_blocks)
            got = got.value
            want = model.prepare_store(hashes)
            if want is None:
                assert got is None, f"step {step}: prepare_store should fail (no evictable room)"
            else:
                assert got is not None, f"step {step}: prepare_store failed but room could be made"
                new, ids, evicted = want
                got_new, got_evicted, got_ids = _unpack(got)
                assert got_new == new, f"step {step}"
                assert got_evicted == evicted, f"step {step}: eviction order"
                assert got_ids == ids, f"step {step}: CPU block ids"
                if new:
                    stores_in_flight.append(new)
        elif op < 0.50 and stores_in_flight:
            hashes = stores_in_flight.pop(rng.randrange(len(stores_in_flight)))
            success = rng.random() < 0.8
            with subject.batch() as b:
                done = b.call(mgr.complete_store, hashes, success=success)
                free = b.call(backend.get_num_free_blocks)
            assert done.value is None
            model.complete_store(hashes, success=success)
        elif op < 0.62:
            ready = sorted(model.ready())
            with subject.batch() as b:
                if ready:
                    hashes = rng.sample(ready, rng.randint(1, min(4, len(ready))))
                    spec = b.call(mgr.prepare_load, hashes)
                free = b.call(backend.get_num_free_blocks)
            if ready:
                assert _ids(spec.value) == model.prepare_load(hashes), f"step {step}: load ids"
                loads_in_flight.append(hashes)
        elif op < 0.72 and loads_in_flight:
            hashes = loads_in_flight.pop(rng.randrange(len(loads_in_flight)))
            with subject.batch() as b:
                done = b.call(mgr.complete_load, hashes)
                free = b.call(backend.get_num_free_blocks)
            assert done.value is None
            model.complete_load(hashes)
        elif op < 0.84:
            hashes = rng.sample(universe, rng.randint(1, 6))
            with subject.batch() as b:
                done = b.call(mgr.touch, hashes)
                free = b.call(backend.get_num_free_blocks)
            assert done.value is None
            model.touch(hashes)
        else:
            hashes = rng.sample(universe, rng.randint(1, 6))
            if rng.random() < 0.5:
                ready = sorted(model.ready())
                if ready:
                    hashes = rng.sample(ready, rng.randint(1, min(5, len(ready)))) + hashes
            with subject.batch() as b:
                hits = b.call(mgr.lookup, hashes)
                free = b.call(backend.get_num_free_blocks)
            assert hits.value == model.lookup(hashes), f"step {step}: lookup"
        assert free.value == model.num_free(), f"step {step}: free blocks"
        if step % 7 == 0:
            got_ev = _events(mgr)
            want_ev = model.take_events()
            assert got_ev == want_ev, f"step {step}: event stream"
            for removed, hashes in got_ev:
                if removed:
                    replay.difference_update(hashes)
                else:
                    replay.update(hashes)
            assert replay == model.ready(), f"step {step}: events do not replay to the ready set"


def test_concurrent_loads_keep_block_protected():
    """Requirement: a block read by two loads stays protected from eviction until BOTH loads
    complete; prepare_store fails (None) while it is the only candidate, and evicts it once
    the second complete_load ran."""
    backend, mgr = _mk(2)
    a, b, c, d = H(1, 2, 3, 4)
    _store(mgr, [a, b])
    mgr.prepare_load([a])
    mgr.prepare_load([a])
    mgr.prepare_load([b])
    _events(mgr)
    assert mgr.prepare_store([c]) is None
    mgr.complete_load([a])
    assert mgr.prepare_store([c]) is None, "a still has one load in progress"
    mgr.complete_load([b])
    out = mgr.prepare_store([c])
    assert out is not None and list(out.block_hashes_evicted) == [b]
    mgr.complete_store([c])
    mgr.complete_load([a])
    out = mgr.prepare_store([d])
    assert out is not None and list(out.block_hashes_evicted) == [a]
    assert mgr.lookup([a]) == 0 and mgr.lookup([c]) == 1


def test_pending_stores_are_not_evicted_or_loadable():
    """Requirement: a block whose store is still in progress is not ready (lookup stops at
    it) and is never evicted; a failed store drops only the not-ready blocks, frees their
    ids for reuse (most recently freed first) and emits no event."""
    backend, mgr = _mk(3)
    a, b, c, d, e = H(10, 11, 12, 13, 14)
    _store(mgr, [a])
    out = mgr.prepare_store([b, c])
    assert _ids(out.store_spec) == [1, 2]
    assert mgr.lookup([a, b, c]) == 1
    assert mgr.prepare_store([d, e]) is None, "only a is evictable"
    out = mgr.prepare_store([d])
    assert list(out.block_hashes_evicted) == [a] and _ids(out.store_spec) == [0]
    _events(mgr)
    mgr.complete_store([b, c, d], success=False)
    assert _events(mgr) == []
    assert backend.get_num_free_blocks() == 3
    assert mgr.lookup([b]) == 0 and mgr.lookup([d]) == 0
    out = mgr.prepare_store([e])
    assert _ids(out.store_spec) == [0], "the most recently freed id (d's, 0) is reused first"


def test_failed_prepare_store_changes_nothing():
    """Requirement: prepare_store that cannot make room returns None and changes nothing:
    no block is evicted, no event, the free count, lookups and the LRU order are exactly as
    before (the next successful call evicts what it would have evicted anyway)."""
    backend, mgr = _mk(4)
    a, b, c, d, x, y, z = H(20, 21, 22, 23, 24, 25, 26)
    _store(mgr, [a, b, c, d])
    mgr.prepare_load([c])
    mgr.prepare_load([d])
    mgr.touch([b])
    _events(mgr)
    free_before = backend.get_num_free_blocks()
    assert mgr.prepare_store([x, y, z]) is None  # needs 3, only a and b are evictable
    assert _events(mgr) == []
    assert backend.get_num_free_blocks() == free_before
    assert mgr.lookup([a, b, c, d]) == 4
    out = mgr.prepare_store([x])
    assert list(out.block_hashes_evicted) == [a], "LRU order must be unchanged by the failed call"
    out = mgr.prepare_store([y])
    assert list(out.block_hashes_evicted) == [b]


def test_touch_order_first_hash_most_recent():
    """Requirement: after touch(hashes) the touched blocks are the most recently used, the
    first hash being the most recent of all; unknown hashes are ignored; lookup does not
    change the recency order."""
    backend, mgr = _mk(5)
    hs = H(30, 31, 32, 33, 34)
    unknown = H(99)[0]
    for h in hs:
        _store(mgr, [h])
    mgr.touch([hs[1], unknown, hs[3], hs[0]])
    mgr.lookup([hs[2], hs[4]])
    _events(mgr)
    evicted = []
    for i, new in enumerate(H(40, 41, 42, 43, 44)):
        out = mgr.prepare_store([new])
        evicted += list(out.block_hashes_evicted)
        mgr.complete_store([new])
    assert evicted == [hs[2], hs[4], hs[0], hs[3], hs[1]]


def test_prepare_store_never_evicts_a_block_it_names():
    """Requirement: prepare_store never evicts a block named in the same call. An already
    stored block in the list is skipped *and stays stored* even when it is the least recently
    used evictable block; when only named blocks could make room, the call returns None and
    changes nothing."""
    backend, mgr = _mk(4)
    a, b, c, d, e, f = H(50, 51, 52, 53, 54, 55)
    _store(mgr, [a, b, c, d])  # recency, oldest first: a b c d
    _events(mgr)
    out = mgr.prepare_store([a, e])
    assert out is not None
    new, evicted, ids = _unpack(out)
    assert new == [e]
    assert evicted == [b], "a is named in the call: the oldest evictable block not named is b"
    assert ids == [1], "b's CPU block is the one reused"
    mgr.complete_store([e])
    assert mgr.lookup([a]) == 1, "a block the call named was evicted by it"
    assert [ev for ev in _events(mgr) if ev[0]] == [(True, [b])]

    # Every evictable block is named: no room can be made, and nothing changes.
    backend, mgr = _mk(2)
    _store(mgr, [a, b])
    _events(mgr)
    assert mgr.prepare_store([a, b, c]) is None
    assert _events(mgr) == [] and backend.get_num_free_blocks() == 0
    assert mgr.lookup([a, b]) == 2
    # A named block is skipped and kept; an unnamed one makes the room.
    out = mgr.prepare_store([b, c])
    assert out is not None and list(out.block_hashes_evicted) == [a]
