"""State probes for the manager's inputs: every method takes any iterable of block hashes (the
scheduler passes generators and views, not only lists), and a complete_load without a load in
progress is refused instead of corrupting the block's load count."""
# INFRADEV-PROBE-CANARY-dbb67ff107ab

import zlib

import pytest
from infradev_probe import subject, subject_op

cpu = subject.module("vllm.v1.kv_offload.backends.cpu")
lru_manager = subject.module("vllm.v1.kv_offload.lru_manager")
builtins = subject.module("builtins")

PROBE_SECRET = "PROBE-SECRET-kvoffload-iter-5e0c"
BLOCK_SIZE = 16


def H(*ints):
    return [zlib.crc32(PROBE_SECRET.encode() + str(i).encode()).to_bytes(4, "big") + bytes([i % 251])
            for i in ints]


def _once(hashes):
    """A one-shot iterator over ``hashes``, made in the subject (it cannot be read twice)."""
    return builtins.iter(list(hashes))


def _mk(num_blocks):
    backend = cpu.CPUBackend(block_size=BLOCK_SIZE, num_blocks=num_blocks)
    return backend, lru_manager.LRUOffloadingManager(backend, enable_events=True)


def test_every_method_takes_a_one_shot_iterator():
    """Requirement: every method's block_hashes is any Iterable[BlockHash]: given one-shot
    iterators, prepare_store, complete_store, lookup, prepare_load, complete_load and touch
    behave exactly as with lists (hashes to store, evictions in LRU order after touch, hit
    counts, load ids, the event stream, every loaded block evictable once its load ends, a
    block named in an evicting prepare_store kept).

    The official tests pass lists only, which can be read twice and reversed."""
    backend, mgr = _mk(4)
    a, b, c, d, e = H(50, 51, 52, 53, 54)
    out = mgr.prepare_store(_once([a, b, c]))
    assert list(out.block_hashes_to_store) == [a, b, c]
    assert list(out.block_hashes_evicted) == []
    mgr.complete_store(_once([a, b, c]))
    assert mgr.lookup(_once([a, b, c, d])) == 3
    spec = mgr.prepare_load(_once([b, a]))
    assert spec.block_ids.tolist() == [1, 0]
    mgr.complete_load(_once([b, a]))
    mgr.touch(_once([a, b]))  # a most recent, then b: c is the least recently used
    out = mgr.prepare_store(_once([d, e]))  # one free block, two needed: c goes
    assert out is not None and list(out.block_hashes_evicted) == [c]
    mgr.complete_store(_once([d, e]), success=False)  # both dropped, their blocks freed
    assert backend.get_num_free_blocks() == 2
    assert mgr.lookup([d]) == 0 and mgr.lookup([e]) == 0
    out = mgr.prepare_store(_once([d, e]))
    assert out is not None and list(out.block_hashes_evicted) == []
    mgr.complete_store(_once([d, e]), success=True)
    # take_events() is an iterable living in the subject: its items are listed there
    taken = subject_op(mgr.take_events(), "__iter__")
    events = [(ev.removed, list(ev.block_hashes)) for ev in taken]
    assert events == [(False, [a, b, c]), (True, [c]), (False, [d, e])]
    assert backend.get_num_free_blocks() == 0
    # Both loads ended: a and b are evictable again, least recently used (b) first, then a
    # (the stores just prepared are not ready yet, and d, e are more recent).
    out = mgr.prepare_store(_once(H(55)))
    assert out is not None and list(out.block_hashes_evicted) == [b]
    out = mgr.prepare_store(_once(H(56)))
    assert out is not None and list(out.block_hashes_evicted) == [a], (
        "a's load ended (complete_load of a one-shot iterator naming b, then a): it must be "
        "evictable again"
    )

    # An evicting prepare_store whose one-shot input names a stored block keeps that block,
    # even when it is the least recently used.
    backend, mgr = _mk(2)
    mgr.complete_store(mgr.prepare_store([a, b]).block_hashes_to_store)
    out = mgr.prepare_store(_once([a, c]))
    assert out is not None and list(out.block_hashes_to_store) == [c]
    assert list(out.block_hashes_evicted) == [b], "a is named in the call: b must make the room"


def test_complete_load_without_a_load_is_refused():
    """Requirement: complete_load of a ready block with no load in progress is a caller error:
    AssertionError, and the block stays evictable (its load count is not driven below zero),
    so the next prepare_store that needs room can still evict it.

    The official tests only ever pair each complete_load with a prepare_load."""
    backend, mgr = _mk(1)
    a, b = H(60, 61)
    out = mgr.prepare_store([a])
    mgr.complete_store([a])
    with pytest.raises(AssertionError):
        mgr.complete_load([a])
    out = mgr.prepare_store([b])
    assert out is not None and list(out.block_hashes_evicted) == [a]
