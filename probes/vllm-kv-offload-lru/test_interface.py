"""Structural and event-stream probes for the KV-offloading modules: the documented
classes, constructors, keyword parameters, spec types and the event contract."""
# INFRADEV-PROBE-CANARY-02b2b67c3354

import numpy as np

from infradev_probe import subject, subject_op

PROBE_SECRET = "PROBE-SECRET-kvoffload-iface-02b2b67c3354"

abstract = subject.module("vllm.v1.kv_offload.abstract")
backend_mod = subject.module("vllm.v1.kv_offload.backend")
cpu = subject.module("vllm.v1.kv_offload.backends.cpu")
lru_manager = subject.module("vllm.v1.kv_offload.lru_manager")
mediums = subject.module("vllm.v1.kv_offload.mediums")
# The subject's own standard library, for what must be evaluated where the objects live.
dataclasses = subject.module("dataclasses")
builtins = subject.module("builtins")



def _import_now():
    """Imports the modules in the subject at collection, so that no test's measurement
    includes the import. Tests reach every name through the module proxies, which re-import
    in a new subject after a crash: a handle kept from an earlier subject would be stale."""
    for module in (abstract, backend_mod, cpu, lru_manager, mediums):
        try:
            subject.describe(module)
        except Exception:
            pass  # the tests meet the error again and report it


_import_now()


def _h(i):
    return PROBE_SECRET.encode() + i.to_bytes(2, "big")


def _field_names(cls):
    assert subject.call(dataclasses.is_dataclass, cls)
    return {f.name for f in dataclasses.fields(cls)}


def _taken(mgr):
    """take_events(), listed in the subject (a generator there, whose iteration the judge does
    not forward): the events, each a handle."""
    return subject_op(mgr.take_events(), "__iter__")


def _events(mgr):
    """take_events(), each event as (removed, block_hashes, block_size, medium)."""
    events = _taken(mgr)
    with subject.batch() as b:
        items = [(b.getattr(e, "removed"), b.getattr(e, "block_hashes"),
                  b.getattr(e, "block_size"), b.getattr(e, "medium")) for e in events]
    return [(r.value, list(h.value), s.value, m.value) for r, h, s, m in items]


def test_public_interface():
    """Requirement: the documented modules export the documented classes; CPUBackend and
    LRUOffloadingManager accept keyword arguments (block_size, num_blocks, backend,
    enable_events) and every manager method works with the documented keyword names;
    specs are CPULoadStoreSpec with an int64 numpy block_ids array; PrepareStoreOutput and
    OffloadingEvent are dataclasses with the documented fields."""
    LoadStoreSpec = abstract.LoadStoreSpec
    OffloadingEvent = abstract.OffloadingEvent
    OffloadingManager = abstract.OffloadingManager
    PrepareStoreOutput = abstract.PrepareStoreOutput
    Backend = backend_mod.Backend
    BlockStatus = backend_mod.BlockStatus
    CPUBackend = cpu.CPUBackend
    LRUOffloadingManager = lru_manager.LRUOffloadingManager
    BlockIDsLoadStoreSpec = mediums.BlockIDsLoadStoreSpec
    CPULoadStoreSpec = mediums.CPULoadStoreSpec
    GPULoadStoreSpec = mediums.GPULoadStoreSpec
    assert subject.issubclass(LRUOffloadingManager, OffloadingManager)
    assert subject.issubclass(CPUBackend, Backend)
    assert subject.issubclass(CPULoadStoreSpec, BlockIDsLoadStoreSpec)
    assert subject.issubclass(GPULoadStoreSpec, BlockIDsLoadStoreSpec)
    assert subject.issubclass(BlockIDsLoadStoreSpec, LoadStoreSpec)
    assert CPULoadStoreSpec.medium() == "CPU" and GPULoadStoreSpec.medium() == "GPU"
    spec = GPULoadStoreSpec([3, 1, 2])
    block_ids = spec.block_ids
    assert isinstance(block_ids, np.ndarray) and block_ids.dtype == np.int64
    assert np.ndim(block_ids) == 1 and block_ids.tolist() == [3, 1, 2]
    assert _field_names(PrepareStoreOutput) == {
        "block_hashes_to_store", "store_spec", "block_hashes_evicted"}
    assert _field_names(OffloadingEvent) == {
        "block_hashes", "block_size", "medium", "removed"}

    backend = CPUBackend(block_size=32, num_blocks=3)
    assert backend.block_size == 32 and backend.medium == "CPU"
    assert backend.get_num_free_blocks() == 3
    mgr = LRUOffloadingManager(backend=backend, enable_events=True)
    a, b = _h(1), _h(2)
    out = mgr.prepare_store(block_hashes=[a, b])
    assert subject.isinstance(out, PrepareStoreOutput)
    assert subject.isinstance(out.store_spec, CPULoadStoreSpec)
    assert out.store_spec.block_ids.tolist() == [0, 1]
    assert backend.get_num_free_blocks() == 1
    assert mgr.lookup(block_hashes=[a, b]) == 0
    mgr.complete_store(block_hashes=[a, b], success=True)
    # Any iterable: an iterator made in the subject, consumed there.
    assert mgr.lookup(block_hashes=builtins.iter([a, b])) == 2
    load = mgr.prepare_load(block_hashes=[b, a])
    assert subject.isinstance(load, CPULoadStoreSpec) and load.block_ids.tolist() == [1, 0]
    mgr.complete_load(block_hashes=[b, a])
    mgr.touch(block_hashes=[a])
    events = _taken(mgr)
    assert len(events) == 1 and subject.isinstance(events[0], OffloadingEvent)

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
    CPUBackend = cpu.CPUBackend
    LRUOffloadingManager = lru_manager.LRUOffloadingManager
    backend = CPUBackend(block_size=48, num_blocks=2)
    mgr = LRUOffloadingManager(backend, enable_events=True)
    a, b, c, d = (_h(i) for i in range(10, 14))

    def take():
        evs = _events(mgr)
        for _, _, block_size, medium in evs:
            assert block_size == 48 and medium == "CPU"
        return [(removed, hashes) for removed, hashes, _, _ in evs]

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
    assert _taken(quiet) == []
