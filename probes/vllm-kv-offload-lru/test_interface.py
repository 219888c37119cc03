"""Structural and event-stream probes for the KV-offloading modules: the documented
classes, constructors, keyword parameters, spec types and the event contract."""
# INFRADEV-PROBE-CANARY-02b2b67c3354

import dataclasses

import numpy as np

from vllm.v1.kv_offload.abstract import (LoadStoreSpec, OffloadingEvent,
                                         OffloadingManager, PrepareStoreOutput)
from vllm.v1.kv_offload.backend import Backend, BlockStatus
from vllm.v1.kv_offload.backends.cpu import CPUBackend
from vllm.v1.kv_offload.lru_manager import LRUOffloadingManager
from vllm.v1.kv_offload.mediums import (BlockIDsLoadStoreSpec, CPULoadStoreSpec,
                                        GPULoadStoreSpec)

PROBE_SECRET = "PROBE-SECRET-kvoffload-iface-02b2b67c3354"


def _h(i):
    return PROBE_SECRET.encode() + i.to_bytes(2, "big")


def test_public_interface():
    """Requirement: the documented modules export the documented classes; CPUBackend and
    LRUOffloadingManager accept keyword arguments (block_size, num_blocks, backend,
    enable_events) and every manager method works with the documented keyword names;
    specs are CPULoadStoreSpec with an int64 numpy block_ids array; PrepareStoreOutput and
    OffloadingEvent are dataclasses with the documented fields."""
    assert issubclass(LRUOffloadingManager, OffloadingManager)
    assert issubclass(CPUBackend, Backend)
    assert issubclass(CPULoadStoreSpec, BlockIDsLoadStoreSpec)
    assert issubclass(GPULoadStoreSpec, BlockIDsLoadStoreSpec)
    assert issubclass(BlockIDsLoadStoreSpec, LoadStoreSpec)
    assert CPULoadStoreSpec.medium() == "CPU" and GPULoadStoreSpec.medium() == "GPU"
    spec = GPULoadStoreSpec([3, 1, 2])
    assert isinstance(spec.block_ids, np.ndarray) and spec.block_ids.dtype == np.int64
    assert spec.block_ids.tolist() == [3, 1, 2]
    assert {f.name for f in dataclasses.fields(PrepareStoreOutput)} == {
        "block_hashes_to_store", "store_spec", "block_hashes_evicted"}
    assert {f.name for f in dataclasses.fields(OffloadingEvent)} == {
        "block_hashes", "block_size", "medium", "removed"}

    backend = CPUBackend(block_size=32, num_blocks=3)
    assert backend.block_size == 32 and backend.medium == "CPU"
    assert backend.get_num_free_blocks() == 3
    mgr = LRUOffloadingManager(backend=backend, enable_events=True)
    a, b = _h(1), _h(2)
    out = mgr.prepare_store(block_hashes=[a, b])
    assert isinstance(out, PrepareStoreOutput)
    assert isinstance(out.store_spec, CPULoadStoreSpec)
    assert out.store_spec.block_ids.tolist() == [0, 1]
    assert backend.get_num_free_blocks() == 1
    assert mgr.lookup(block_hashes=[a, b]) == 0
    mgr.complete_store(block_hashes=[a, b], success=True)
    assert mgr.lookup(block_hashes=iter([a, b])) == 2  # any iterable
    load = mgr.prepare_load(block_hashes=[b, a])
    assert isinstance(load, CPULoadStoreSpec) and load.block_ids.tolist() == [1, 0]
    mgr.complete_load(block_hashes=[b, a])
    mgr.touch(block_hashes=[a])
    events = list(mgr.take_events())
    assert len(events) == 1 and isinstance(events[0], OffloadingEvent)

    status = BlockStatus()
    assert status.ref_cnt == -1 and status.is_ready is False
    status.ref_cnt = 0
    assert status.is_ready is True


def test_event_stream_contract():
    """Requirement: with enable_events=True each evicting prepare_store emits one removed
    event (evicted hashes in eviction order) and each completing complete_store one stored
    event (only the blocks that became ready), with the backend's block_size and medium;
    take_events drains; a no-op complete_store, a failed store and a failed prepare_store
    emit nothing. With the default (events off) take_events is always empty."""
    backend = CPUBackend(block_size=48, num_blocks=2)
    mgr = LRUOffloadingManager(backend, enable_events=True)
    a, b, c, d = (_h(i) for i in range(10, 14))

    def take():
        evs = list(mgr.take_events())
        for e in evs:
            assert e.block_size == 48 and e.medium == "CPU"
        return [(e.removed, list(e.block_hashes)) for e in evs]

    mgr.prepare_store([a, b])
    assert take() == []
    mgr.complete_store([a])
    mgr.complete_store([a, b])
    assert take() == [(False, [a]), (False, [b])]
    assert take() == []
    mgr.complete_store([a, b])  # already ready: nothing new
    assert take() == []
    mgr.prepare_load([a])
    assert mgr.prepare_store([c, d]) is None
    assert take() == []
    mgr.prepare_store([c])
    mgr.complete_store([c], success=False)
    assert take() == [(True, [b])]
    mgr.complete_load([a])
    mgr.prepare_store([c, d])
    mgr.complete_store([d, c])
    assert take() == [(True, [a]), (False, [d, c])]

    quiet = LRUOffloadingManager(CPUBackend(block_size=48, num_blocks=1))
    for i in range(5):
        out = quiet.prepare_store([_h(100 + i)])
        quiet.complete_store(out.block_hashes_to_store)
    assert list(quiet.take_events()) == []
