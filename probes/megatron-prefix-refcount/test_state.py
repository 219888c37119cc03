"""State probes for KVBlockAllocator's reference counts under prefix caching.

Requests share prefix blocks (a request that matches a cached prefix pins those blocks: ref
count + 1), and every request that finishes on the same step is released in ONE
`release_memory_blocks` call, so a shared block appears in the released tensor once per
finishing owner. An independent model of reference counts, the free pool and the cache,
written here, is compared with the allocator after every step."""
# INFRADEV-PROBE-CANARY-6b1d0e93a7c2

import random
from collections import Counter

import torch

from _context import fake_context, import_now, kept
from infradev_probe import subject, workload_seed

PROBE_SECRET = "PROBE-SECRET-refcount-state-71c4"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

kv_block_allocator = subject.module("megatron.core.inference.contexts.kv_block_allocator")
config = subject.module("megatron.core.inference.config")
import_now(kv_block_allocator, config)

TOTAL = 96  # block 0..94 usable, the last id is the dummy block
STEPS = 500


class Sim:
    """A real allocator plus a model: per-block reference counts, hashes, the free pool."""

    def __init__(self, policy, rng):
        self.lru = policy == "lru"
        self.rng = rng
        self.clock = 1
        self.ctx = fake_context(requests=8, clock=self.clock)
        self.a = kv_block_allocator.KVBlockAllocator(
            context=self.ctx,
            total_count=TOTAL,
            paused_count=1,
            enable_prefix_caching=True,
            prefix_caching_eviction_policy=(
                config.PrefixCachingEvictionPolicy.LRU if self.lru
                else config.PrefixCachingEvictionPolicy.REF_ZERO),
        )
        self.refs = kept(self.a, "block_ref_counts")
        self.ref = Counter()  # block -> expected reference count (absent = 0)
        self.hash_of = {}  # block -> registered hash (expected kv_hash_to_block_id, inverted)
        self.free = TOTAL - 1  # expected total_avail
        self.requests = {}  # request id -> its blocks (distinct ids, in prefix order)
        self.next_rid = 0
        self.next_hash = 1
        self.chains = []  # registered chains, root first: [(block, hash), ...]

    # ---- actions ------------------------------------------------------------------------

    def new_request(self):
        """A prompt of 1-5 fresh blocks, optionally behind a matched prefix of a live or cached
        chain; full blocks are registered, a partial last block stays unregistered."""
        prefix = []
        # Matching pins a root-to-node run of a registered chain (a live request's, or one
        # that is only cached now): the longest run whose blocks still carry their hashes.
        if self.chains and self.rng.random() < 0.8:
            chain = self.rng.choice(self.chains)
            run = []
            for b, h in chain:
                if self.hash_of.get(b) != h:
                    break
                run.append(b)
            prefix = run[: self.rng.randrange(0, len(run) + 1)]
        if prefix:  # add_request pins matched blocks first (they must survive eviction)
            self.refs[torch.tensor(prefix, dtype=torch.int64)] += 1
            if self.lru:
                self.a.update_timestamps(torch.tensor(prefix, dtype=torch.int64))
            for b in prefix:
                self.ref[b] += 1
        n = self.rng.randrange(1, 6)
        if self.free < n:
            if not self.lru or self.evictable() == 0:
                n = 0
            else:
                self.evict_all()
                if self.free < n:
                    n = 0
        if not prefix and n == 0:
            return None
        fresh = []
        if n:
            out = self.a.allocate_memory_blocks(n)
            assert out is not None, f"allocating {n} blocks failed with {self.free} expected free"
            fresh = [int(x) for x in out.tolist()]
            assert len(set(fresh)) == n, f"allocate_memory_blocks handed out a block twice: {fresh}"
            for b in fresh:
                assert self.ref[b] == 0 and b not in self.hash_of, (
                    f"block {b} handed out while still referenced ({self.ref[b]}) or cached")
                self.ref[b] = 1
            self.free -= n
            full = fresh if self.rng.random() < 0.5 else fresh[:-1]
            if full:
                hashes = list(range(self.next_hash, self.next_hash + len(full)))
                self.next_hash += len(full)
                kwargs = {}
                if self.lru:
                    first_parent = self.hash_of.get(prefix[-1], 0) if prefix else 0
                    kwargs["parent_hashes"] = [first_parent] + hashes[:-1]
                self.a.register_kv_block_hashes(full, hashes, **kwargs)
                for b, h in zip(full, hashes):
                    self.hash_of[b] = h
                self.chains.append([(b, self.hash_of[b]) for b in prefix + full])
                del self.chains[:-200]
        rid = self.next_rid
        self.next_rid += 1
        self.requests[rid] = prefix + fresh
        return rid

    def release_together(self, rids):
        """The requests finishing on one step, released in ONE call: a shared block appears
        once per finishing owner (order shuffled, as the context's gather does not sort)."""
        blocks = [b for r in rids for b in self.requests.pop(r)]
        if not blocks:
            return
        self.rng.shuffle(blocks)
        self.a.release_memory_blocks(torch.tensor(blocks, dtype=torch.int32))
        for b, k in Counter(blocks).items():
            self.ref[b] -= k
            assert self.ref[b] >= 0
            if self.ref[b] == 0:
                del self.ref[b]
                if b not in self.hash_of:
                    self.free += 1  # unregistered: straight back to the pool, once
                elif not self.lru:
                    del self.hash_of[b]  # REF_ZERO: deregistered and freed, once
                    self.free += 1

    def evictable(self):
        return sum(1 for b in self.hash_of if self.ref[b] == 0)

    def evict_all(self):
        need = self.evictable()
        assert self.a.evict_lru_blocks(need) is True, (
            f"evict_lru_blocks({need}) failed: the model has {need} cached blocks at ref 0")
        for b in [b for b in self.hash_of if self.ref[b] == 0]:
            del self.hash_of[b]
        self.free += need

    # ---- the comparison -----------------------------------------------------------------

    def check(self, where):
        with subject.batch() as b:
            items = [b.getattr(self.a, name) for name in (
                "block_ref_counts", "block_hashes", "block_bag", "total_avail",
                "kv_hash_to_block_id")]
            b.call(self.a.get_evictable_block_count)
        refs, hashes, bag, avail, index, evictable = b.results
        refs = [int(x) for x in refs.tolist()]
        hashes = [int(x) for x in hashes.tolist()]
        expected = [self.ref[i] for i in range(TOTAL)]
        wrong = {i: (refs[i], expected[i]) for i in range(TOTAL - 1) if refs[i] != expected[i]}
        assert not wrong, (
            f"{where}: block_ref_counts differ from one reference per live owner "
            f"(block: (actual, expected)): {dict(list(wrong.items())[:8])}")
        assert int(avail) == self.free, f"{where}: total_avail {int(avail)}, expected {self.free}"
        pool = [int(x) for x in bag[: int(avail)].tolist()]
        assert len(set(pool)) == len(pool), (
            f"{where}: a block is in the free pool twice: "
            f"{[b for b, k in Counter(pool).items() if k > 1]}")
        held = [b for b in pool if self.ref[b] > 0 or refs[b] > 0]
        assert not held, f"{where}: blocks in the free pool while still referenced: {held}"
        expected_index = {h: b for b, h in self.hash_of.items()}
        assert dict(index) == expected_index, (
            f"{where}: kv_hash_to_block_id has {len(index)} entries, expected "
            f"{len(expected_index)}; missing {sorted(set(expected_index) - set(index))[:8]}, "
            f"extra {sorted(set(index) - set(expected_index))[:8]}")
        for b, h in self.hash_of.items():
            assert hashes[b] == h, f"{where}: block_hashes[{b}] = {hashes[b]}, expected {h}"
        cached_free = [b for b in self.hash_of if self.ref[b] == 0]
        if self.lru:
            assert int(evictable) == len(cached_free), (
                f"{where}: get_evictable_block_count() = {int(evictable)}, but "
                f"{len(cached_free)} blocks are cached with no owner left")
        assert set(pool).isdisjoint(self.hash_of), f"{where}: a cached block is in the free pool"


def _drive(policy, seed):
    rng = random.Random(seed)
    sim = Sim(policy, rng)
    for step in range(STEPS):
        sim.clock += 1
        sim.ctx.prefix_cache_lru_clock = sim.clock
        for _ in range(rng.randrange(1, 4)):
            sim.new_request()
        live = list(sim.requests)
        if live and rng.random() < 0.6:
            k = rng.randrange(1, min(6, len(live)) + 1)
            sim.release_together(rng.sample(live, k))
        sim.check(f"step {step}")
    # Every owner finishes on one last step: nothing stays referenced.
    sim.release_together(list(sim.requests))
    sim.check("after the final release")
    assert not +sim.ref
    return sim


def test_lru_shared_release_ref_counts():
    """Requirement: under the LRU policy, `release_memory_blocks` drops one reference per
    occurrence of a block in the released tensor. Over 500 seeded steps of requests that pin
    matched prefixes (of live requests or of the cache) and finish in groups released in one
    call each, the ref counts, `total_avail`, the free pool (no duplicates, no referenced or
    cached block in it), `kv_hash_to_block_id` and `get_evictable_block_count()` (= cached
    blocks at ref 0) match the model after every step; after the last release every ref
    count is 0 and the whole cache is evictable.

    The official test releases one block twice in a 6-block pool once; it never mixes shared
    registered and unregistered blocks of several owners, pins cached blocks, or evicts."""
    sim = _drive("lru", SEED)
    need = sim.evictable()
    assert need > 0
    sim.evict_all()
    sim.check("after evicting the whole cache")
    assert sim.free == TOTAL - 1


def test_ref_zero_shared_release_ref_counts():
    """Requirement: under the REF_ZERO policy, each occurrence of a block in a released tensor
    drops one reference; a registered block is deregistered and returned to the free pool
    exactly once, when its last owner is released and not before. Over 500 seeded steps the
    ref counts, `total_avail`, the free pool (no duplicates, no referenced block) and
    `kv_hash_to_block_id` match the model after every step, and the pool is full at the end.

    The official test covers one shared block with three owners; it never checks the pool
    after hundreds of reuses of freed ids."""
    sim = _drive("ref_zero", SEED + 1)
    assert sim.free == TOTAL - 1 and not sim.hash_of
