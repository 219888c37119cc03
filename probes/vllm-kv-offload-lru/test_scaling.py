"""Time and memory probes: the manager's per-call cost must not depend on how many blocks
are offloaded, and its memory must stay bounded by the capacity (no event backlog when
events are off)."""
# INFRADEV-PROBE-CANARY-44467852cc01

import collections
import random

from infradev_probe import subject, subject_op, workload_seed

PROBE_SECRET = "PROBE-SECRET-kvoffload-scaling-44467852cc01"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)
CHUNK = 16
STEPS_PER_BATCH = 100  # 600 requests a round trip
FILL = 1024  # hashes a prepare_store while filling the backend

cpu = subject.module("vllm.v1.kv_offload.backends.cpu")
lru_manager = subject.module("vllm.v1.kv_offload.lru_manager")


def _import_now():
    """Imports the modules in the subject at collection, so that no test's measurement
    includes the import. Tests reach every name through the module proxies, which re-import
    in a new subject after a crash: a handle kept from an earlier subject would be stale."""
    for module in (cpu, lru_manager):
        try:
            subject.describe(module)
        except Exception:
            pass  # the tests meet the error again and report it


_import_now()


def _h(i):
    return i.to_bytes(8, "little") + b"kv"


class _Recency:
    """The judge's O(1) model of which blocks the workload below keeps stored (LRU order,
    every block ready, no load left in progress at a store): it decides how many hits a
    request loads, as the lookup result did in-process, without a round trip per step."""

    def __init__(self):
        self.order = collections.OrderedDict()  # oldest first

    def store(self, hashes):
        for h in hashes:
            self.order[h] = None

    def evict(self, n):
        return [self.order.popitem(last=False)[0] for _ in range(n)]

    def touch(self, hashes):
        for h in reversed(hashes):
            if h in self.order:
                self.order.move_to_end(h)

    def lookup(self, hashes):
        n = 0
        for h in hashes:
            if h not in self.order:
                break
            n += 1
        return n


MEMORY_CYCLES = 40_000
MEMORY_BATCH = 50


def test_memory_bounded_by_capacity():
    """Requirement: with events off (the default), 40,000 store/evict cycles through a
    256-block backend keep the manager's memory bounded by its capacity: evicted and failed
    blocks are forgotten and no event backlog is kept.

    Budget: peak_memory_mb in probes.toml, measured by the broker from outside (the
    subject's peak above its level at the test's start). The calls go in batches of 50
    cycles, so the subject never holds more than a few hundred requests' worth of decoded
    hashes and results. A resident-size measurement cannot see growth that fits in memory
    the process already holds free, so this test runs first in the probe phase (its file is
    first in probes.toml, and it is the file's first test), and the workload is long enough
    that keeping anything per cycle (an event backlog: ~25 MiB; a record per evicted hash:
    ~9 MiB) is well above the budget."""
    mgr = lru_manager.LRUOffloadingManager(cpu.CPUBackend(block_size=16, num_blocks=256))
    for first in range(0, MEMORY_CYCLES, MEMORY_BATCH):
        with subject.batch() as b:
            for i in range(first, first + MEMORY_BATCH):
                hs = [_h(4 * i + k) for k in range(4)]
                out = b.call(mgr.prepare_store, hs)
                b.call(mgr.complete_store, hs, success=(i % 5 != 0))
        assert all(item.value is not None for item in b.items[0::2])
        del b, out
    # take_events() is an iterable living in the subject: its items are listed there
    assert subject_op(mgr.take_events(), "__iter__") == []


def _workload(num_blocks, rounds, rng):
    """Fill the backend, then run `rounds` scheduler steps: touch a request's 16 blocks,
    look them up, load and release up to 4 hits, and offload 16 new blocks (evicting 16).

    Returns the broker's subject time of the steps' batches (the fill and the checks of the
    results are not counted), in seconds."""
    mgr = lru_manager.LRUOffloadingManager(cpu.CPUBackend(block_size=16, num_blocks=num_blocks))
    model = _Recency()
    with subject.batch() as b:
        for start in range(0, num_blocks, FILL):
            hs = [_h(i) for i in range(start, start + FILL)]
            b.call(mgr.prepare_store, hs)
            b.call(mgr.complete_store, hs)
            model.store(hs)
    nxt = num_blocks
    with subject.batch() as c:
        fills = [c.getattr(out, "block_hashes_to_store") for out in b.results[0::2]]
    assert [len(f.value) for f in fills] == [FILL] * (num_blocks // FILL)
    ns = 0
    for first in range(0, rounds, STEPS_PER_BATCH):
        expected = []
        with subject.batch() as b:
            for _ in range(first, min(first + STEPS_PER_BATCH, rounds)):
                base = rng.randrange(nxt - num_blocks + CHUNK, nxt - CHUNK)
                req = [_h(i) for i in range(base, base + CHUNK)]
                b.call(mgr.touch, req)
                model.touch(req)
                hits = model.lookup(req)
                lookup = b.call(mgr.lookup, req)
                load = req[:min(hits, 4)]
                b.call(mgr.prepare_load, load)
                b.call(mgr.complete_load, load)
                hs = [_h(i) for i in range(nxt, nxt + CHUNK)]
                out = b.call(mgr.prepare_store, hs)
                b.call(mgr.complete_store, hs)
                expected.append((lookup, hits, out, model.evict(CHUNK)))
                model.store(hs)
                nxt += CHUNK
        ns += subject.last_subject_ns
        b.results  # raises the first error the subject raised
        with subject.batch() as b:
            evicted = [b.getattr(out.value, "block_hashes_evicted") for _, _, out, _ in expected]
        for (lookup, hits, _, want), got in zip(expected, evicted):
            assert lookup.value == hits, "lookup does not match the LRU contents"
            assert list(got.value) == want, "eviction is not least recently used first"
    return ns / 1e9


def test_step_cost_independent_of_offloaded_blocks():
    """Requirement: 1500 scheduler steps (touch 16, lookup, load up to 4, store 16 evicting
    16) take about as long with 32,768 offloaded blocks as with 1,024: each call is
    O(hashes passed + evictions), not O(blocks stored).

    Time is the broker's subject time of the steps' batches (100 steps, 600 requests, a
    round trip), so round-trip latency is not counted and the per-request cost of the
    subject's call server is the same for both pools. Tolerance: best of 3 runs each, interleaved; the
    large pool may be up to 4x slower (cache effects, noisy shared CPUs). A recency list
    scanned or rebuilt per call (list.remove, sorting by timestamp, min() over the pool) is
    O(32,768) per call at the large pool. Budget wall_time_s in probes.toml bounds the
    subject time of the whole test (fills and checks included)."""
    rng = random.Random(SEED)
    smalls, larges = [], []
    for _ in range(3):  # interleaved, so that a change in the machine's load hits both
        smalls.append(_workload(1024, 1500, rng))
        larges.append(_workload(32768, 1500, rng))
    small, large = min(smalls), min(larges)
    assert large < 4.0 * small + 0.05, (
        f"32k-block pool: {large:.3f}s vs 1k-block pool: {small:.3f}s for the same steps")
