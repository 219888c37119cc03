"""State probes for descendant-first LRU prefix-cache eviction in KVBlockAllocator.

The allocator is driven the way DynamicInferenceContext drives it: match a prompt's
chained block hashes against `kv_hash_to_block_id`, pin the matched blocks, allocate the
rest (which may evict), register the new full blocks with their parent hashes (in two
chunks, as chunked prefill does), and release whole requests later. An independent model
of the prefix forest, written here, predicts every eviction."""
# INFRADEV-PROBE-CANARY-edcf67b4ff3c

import hashlib
import random

import torch

from _context import fake_context, import_now, kept
from infradev_probe import subject, workload_seed

PROBE_SECRET = "PROBE-SECRET-lru-state-3b91"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

kv_block_allocator = subject.module("megatron.core.inference.contexts.kv_block_allocator")
config = subject.module("megatron.core.inference.config")
import_now(kv_block_allocator, config)


def _pin(a, blocks):
    """What add_request does to matched blocks: ref count + 1 in the allocator's own tensor,
    then update_timestamps."""
    refs = kept(a, "block_ref_counts")
    refs[blocks] += 1
    a.update_timestamps(blocks)


def _chain_hashes(contents):
    """Parent-chained positive 62-bit block hashes (0 is reserved for 'no parent')."""
    out, prev = [], 0
    for c in contents:
        digest = hashlib.sha256(f"{prev}:{c}".encode()).digest()
        h = (int.from_bytes(digest[:8], "little") >> 2) or 1
        out.append(h)
        prev = h
    return out


class Sim:
    """Drives a real allocator and keeps an independent model of the cached forest."""

    def __init__(self, total_count):
        self.ctx = fake_context(requests=8)
        self.clock = 0  # the context's prefix_cache_lru_clock, set by the probe alone
        self.a = kv_block_allocator.KVBlockAllocator(
            context=self.ctx,
            total_count=total_count,
            paused_count=1,
            enable_prefix_caching=True,
            prefix_caching_eviction_policy=config.PrefixCachingEvictionPolicy.LRU,
        )
        self.total_count = total_count
        self.cached = {}  # hash -> block id (expected kv_hash_to_block_id)
        self.parent = {}  # hash -> parent hash (0 = root)
        self.block_hash = {}  # block id -> hash (registered blocks)
        self.ts = {}  # block id -> last allocation / pin clock
        self.ref = {}  # block id -> reference count (> 0 only)
        self.requests = {}  # rid -> list of block ids it holds
        self.next_rid = 0
        self.evictions = 0

    # -- independent model -------------------------------------------------
    def expected_free(self):
        in_use = len(self.ref)
        cached_free = sum(1 for b in self.cached.values() if b not in self.ref)
        return self.total_count - 1 - in_use - cached_free

    def evictable(self):
        return [b for b in self.cached.values() if b not in self.ref]

    def expected_eviction(self, need):
        """Leaf-peel: repeatedly take the evictable block (ref 0, cached) with no cached
        child and the smallest (timestamp, block id)."""
        cand = set(self.evictable())
        children = {b: 0 for b in cand}
        for h, b in self.cached.items():
            ph = self.parent[h]
            if ph and ph in self.cached and self.cached[ph] in cand:
                children[self.cached[ph]] += 1
        out = []
        while len(out) < need:
            leaves = [b for b in cand if children[b] == 0]
            assert leaves, "model: no leaf (cannot happen for a forest)"
            b = min(leaves, key=lambda x: (self.ts[x], x))
            out.append(b)
            cand.discard(b)
            ph = self.parent[self.block_hash[b]]
            if ph and ph in self.cached and self.cached[ph] in cand:
                children[self.cached[ph]] -= 1
        return out

    def forget(self, block):
        h = self.block_hash.pop(block)
        del self.cached[h]
        del self.parent[h]
        self.ts.pop(block, None)

    # -- operations (production call sequence) -----------------------------
    def tick(self):
        self.clock += 1
        self.ctx.prefix_cache_lru_clock = self.clock

    def match(self, hashes):
        index = self.a.kv_hash_to_block_id  # one copy of the subject's dict
        ids = []
        for h in hashes:
            b = index.get(h)
            if b is None:
                break
            ids.append(b)
        return ids

    def add_request(self, contents, partial, split):
        """Returns the request id, or None when is_memory_available says no."""
        self.tick()
        clock = self.clock
        hashes = _chain_hashes(contents)
        matched = self.match(hashes)
        assert matched == [self.cached[h] for h in hashes[: len(matched)]], "match differs from model"
        n_new = len(hashes) - len(matched) + (1 if partial else 0)
        pinnable = sum(1 for b in matched if b not in self.ref)
        expect_ok = self.expected_free() + len(self.evictable()) - pinnable >= n_new
        got = self.a.is_memory_available(n_new, potential_matched_count=pinnable)
        assert bool(got) == expect_ok, (
            f"is_memory_available({n_new}, potential_matched_count={pinnable}) = {got}, "
            f"expected {expect_ok} (free {self.expected_free()}, evictable {len(self.evictable())})")
        if not expect_ok:
            return None
        # Pin matched blocks before allocating (as add_request does).
        if matched:
            _pin(self.a, torch.tensor(matched, dtype=torch.int32))
            for b in matched:
                self.ref[b] = self.ref.get(b, 0) + 1
                self.ts[b] = clock
        new_ids = []
        if n_new:
            need = n_new - self.expected_free()
            expected_evicted = self.expected_eviction(need) if need > 0 else []
            in_use_before = set(self.ref)
            res = self.a.allocate_memory_blocks(n_new)
            assert res is not None, "allocation failed although is_memory_available said yes"
            new_ids = [int(x) for x in res.clone().tolist()]
            for b in expected_evicted:
                self.forget(b)
            self.evictions += len(expected_evicted)
            assert dict(self.a.kv_hash_to_block_id) == self.cached, (
                f"after evicting for {n_new} blocks the cache differs from the descendant-first "
                f"LRU model (expected to evict blocks {sorted(expected_evicted)})")
            assert len(set(new_ids)) == n_new, f"duplicate block ids handed out: {new_ids}"
            for b in new_ids:
                assert b != self.total_count - 1, "dummy block handed out"
                assert b not in in_use_before, f"block {b} handed out while still in use"
                assert b not in self.block_hash, f"block {b} handed out while still cached"
                self.ref[b] = 1
                self.ts[b] = clock
        table = matched + new_ids
        # Register the new full blocks in two chunks, with their parent hashes.
        first_new = len(matched)
        full_new = list(range(first_new, len(hashes)))
        cut = first_new + split if full_new else first_new
        for lo, hi in ((first_new, min(cut, len(hashes))), (min(cut, len(hashes)), len(hashes))):
            if hi <= lo:
                continue
            ids = table[lo:hi]
            hs = hashes[lo:hi]
            ps = [hashes[k - 1] if k > 0 else 0 for k in range(lo, hi)]
            self.a.register_kv_block_hashes(block_ids=ids, block_hashes=hs, parent_hashes=ps)
            for b, h, p in zip(ids, hs, ps):
                self.cached[h] = b
                self.parent[h] = p
                self.block_hash[b] = h
        rid = self.next_rid
        self.next_rid += 1
        self.requests[rid] = table
        return rid

    def release(self, rid):
        self.release_together([rid])

    def release_together(self, rids):
        """Requests that finish on the same step, released in one call: a block they share
        appears once per request in the tensor."""
        self.tick()
        tables = [self.requests.pop(rid) for rid in rids]
        blocks = [b for table in tables for b in table]
        self.a.release_memory_blocks(torch.tensor(blocks, dtype=torch.int32))
        for b in blocks:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                del self.ref[b]
                if b not in self.block_hash:
                    self.ts.pop(b, None)  # unregistered partial block: back to the pool

    # -- checks --------------------------------------------------------------
    def check(self):
        a = self.a
        # Everything checked is read in one round trip.
        with subject.batch() as b:
            index = b.getattr(a, "kv_hash_to_block_id")
            avail = b.getattr(a, "total_avail")
            refs = b.getattr(a, "block_ref_counts")
            evictable = b.call(a.get_evictable_block_count)
            parent_ids = b.getattr(a, "block_parent_id")
            child_counts = b.getattr(a, "block_child_count")
        index, avail = dict(index.value), avail.value
        assert index == self.cached, "cache index differs from model"
        for h, b in self.cached.items():
            ph = self.parent[h]
            assert ph == 0 or ph in index, (
                f"orphan: cached block {b} has its parent block evicted")
        assert avail == self.expected_free(), (
            f"total_avail {avail} != {self.expected_free()} (blocks leaked or double-freed)")
        refs = refs.value.tolist()
        for b in range(self.total_count - 1):
            assert refs[b] == self.ref.get(b, 0), f"block {b}: ref count {refs[b]} != {self.ref.get(b, 0)}"
        assert int(evictable.value) == len(self.evictable())
        parent_ids = parent_ids.value.tolist()
        child_counts = child_counts.value.tolist()
        kids = {}
        for h, b in self.cached.items():
            ph = self.parent[h]
            want = self.cached[ph] if ph else -1
            assert parent_ids[b] == want, f"block_parent_id[{b}] = {parent_ids[b]}, expected {want}"
            if want >= 0:
                kids[want] = kids.get(want, 0) + 1
        for b in self.cached.values():
            assert child_counts[b] == kids.get(b, 0), (
                f"block_child_count[{b}] = {child_counts[b]}, expected {kids.get(b, 0)}")


def _workload(sim, rng, steps, systems, pinned=()):
    live = []
    for _ in range(steps):
        if live and (rng.random() < 0.42 or len(live) >= 6):
            sim.release(live.pop(rng.randrange(len(live))))
        else:
            base = list(rng.choice(systems))
            contents = base + [rng.randrange(3) for _ in range(rng.randrange(0, 5))]
            rid = sim.add_request(contents, partial=rng.random() < 0.5,
                                  split=rng.randrange(1, 4))
            if rid is None and live:
                sim.release(live.pop(0))
            elif rid is not None:
                live.append(rid)
        sim.check()
        if pinned:
            index, refs = sim.a.kv_hash_to_block_id, sim.a.block_ref_counts
        for hashes, table in pinned:
            for h, b in zip(hashes, table):
                assert index.get(h) == b, "a pinned block was evicted"
                assert refs[b].item() >= 1
    return live


def test_serving_workload_keeps_prefix_forest_consistent():
    """Requirement: across 1200 seeded add/release steps driven like the dynamic inference
    context (match, pin, allocate with eviction, chunked registration with parent hashes,
    release), every eviction removes exactly the blocks that descendant-first LRU predicts
    (evictable leaf with the oldest timestamp, ties by block id), no cached block is ever left
    without its parent, `is_memory_available(n, potential_matched_count=m)` agrees with what
    allocation can deliver, and ref counts, `total_avail`, `block_parent_id` and
    `block_child_count` match an independent model after every step.

    The official tests seed one forest by hand and evict once; they never reuse evicted block
    ids, never evict through `allocate_memory_blocks`, and never check child counts after
    many register/evict cycles."""
    rng = random.Random(SEED)
    sim = Sim(total_count=80)
    systems = [[rng.randrange(10**6) for _ in range(rng.randrange(2, 7))] for _ in range(5)]
    live = _workload(sim, rng, 1200, systems)
    assert sim.evictions > 200, f"workload too light: only {sim.evictions} evictions"
    for rid in live:
        sim.release(rid)
    sim.check()


def test_pinned_prefix_survives_churn():
    """Requirement: blocks held by a live request (ref count > 0) are never evicted or
    handed out, however old their timestamps; a cached continuation below a pinned prefix is
    evictable on its own (the pinned parent acts as a root); once the request is released, its
    chain is peeled from the leaf inward.

    The official tests pin a parent only in a 3-block hand-made layout and never put the
    pinned blocks under allocation pressure."""
    rng = random.Random(SEED + 1)
    sim = Sim(total_count=64)
    # A long-lived agent request: a 6-block prefix pinned at the very first clock tick,
    # plus a finished first turn below it that stays cached.
    prefix = [rng.randrange(10**6) for _ in range(6)]
    agent = sim.add_request(prefix, partial=False, split=2)
    turn1 = sim.add_request(prefix + [7, 8], partial=True, split=1)
    sim.release(turn1)
    sim.check()
    pinned_table = list(sim.requests[agent])
    prefix_hashes = _chain_hashes(prefix)
    systems = [[rng.randrange(10**6) for _ in range(rng.randrange(2, 6))] for _ in range(4)]
    _workload(sim, rng, 500, systems, pinned=[(prefix_hashes, pinned_table)])
    assert sim.evictions > 100
    index = sim.a.kv_hash_to_block_id
    for h, b in zip(prefix_hashes, pinned_table):
        assert index.get(h) == b, "a pinned prefix block was evicted"
    # The turn-1 continuation (older than everything else) must have been evicted.
    cont = _chain_hashes(prefix + [7, 8])[6:]
    assert not any(h in index for h in cont)
    # Release the agent request and peel the whole cache one block at a time.
    sim.release(agent)
    while sim.evictable():
        want = sim.expected_eviction(1)
        assert sim.a.evict_lru_blocks(1) is True
        sim.forget(want[0])
        sim.check()
    assert sim.a.evict_lru_blocks(1) is False


def test_requests_sharing_a_prefix_released_together():
    """Requirement: `release_memory_blocks(blocks)` drops one reference per occurrence of a
    block in `blocks`. Requests that share a prefix and finish on the same step are released
    in one call, so their shared blocks appear once per request: afterwards every shared block
    is back at the reference count the remaining requests hold (0: cached and evictable), the
    free pool and the cache match the model, and the shared prefix can be evicted when space
    is needed.

    The official tests release one request per call, where no block appears twice."""
    rng = random.Random(SEED + 4)
    sim = Sim(total_count=48)
    systems = [[rng.randrange(10**6) for _ in range(rng.randrange(2, 5))] for _ in range(3)]
    for _ in range(12):
        group = []
        system = rng.choice(systems)
        for _ in range(rng.randrange(2, 5)):
            contents = list(system) + [rng.randrange(3) for _ in range(rng.randrange(0, 3))]
            rid = sim.add_request(contents, partial=rng.random() < 0.5, split=rng.randrange(1, 3))
            if rid is not None:
                group.append(rid)
        shared = len({b for r in group for b in sim.requests[r]}) < sum(
            len(sim.requests[r]) for r in group)
        keep = group[-1] if rng.random() < 0.3 else None
        sim.release_together([r for r in group if r != keep])
        sim.check()
        if keep is not None:
            sim.release(keep)
            sim.check()
        assert shared or len(group) < 2, "the requests of a group share their system prompt"
    # Everything is released: the whole cache is evictable and peels down to nothing.
    assert not sim.ref
    need = len(sim.evictable())
    assert need > 0 and sim.a.evict_lru_blocks(need) is True
    for b in sim.expected_eviction(need):
        sim.forget(b)
    sim.check()


def test_failed_allocation_changes_nothing():
    """Requirement: eviction is all-or-nothing. `evict_lru_blocks(n)` with n above the number
    of evictable blocks and `allocate_memory_blocks(n)` with n above free + evictable blocks
    return False / None and change no state (cache index, hashes, ref counts, timestamps,
    parent ids, child counts, `total_avail`); evicting exactly all evictable blocks succeeds
    and empties the cache except for pinned blocks.

    The official insufficient-blocks test only checks the cache index after `evict_lru_blocks`,
    never `allocate_memory_blocks`, the bookkeeping tensors, or pinned blocks."""
    rng = random.Random(SEED + 2)
    sim = Sim(total_count=48)
    systems = [[rng.randrange(10**6) for _ in range(4)] for _ in range(3)]
    live = _workload(sim, rng, 120, systems)
    keep = live[:2]
    for rid in live[2:]:
        sim.release(rid)
    sim.check()
    a = sim.a

    def snapshot():
        """The allocator's state, read in one round trip (tensors cross as copies)."""
        with subject.batch() as b:
            items = [b.getattr(a, name) for name in (
                "kv_hash_to_block_id", "block_hashes", "block_ref_counts", "block_timestamps",
                "block_parent_id", "block_child_count", "total_avail")]
        return tuple(item.value for item in items)

    def same(s1, s2):
        return s1[0] == s2[0] and s1[6] == s2[6] and all(
            torch.equal(x, y) for x, y in zip(s1[1:6], s2[1:6]))

    n_evictable = len(sim.evictable())
    assert n_evictable > 3 and keep
    before = snapshot()
    assert a.evict_lru_blocks(n_evictable + 1) is False
    assert same(before, snapshot()), "a failed evict_lru_blocks changed allocator state"
    too_many = a.total_avail + n_evictable + 1
    assert a.is_memory_available(too_many) is False
    assert a.allocate_memory_blocks(too_many) is None
    assert same(before, snapshot()), "a failed allocate_memory_blocks changed allocator state"
    sim.check()
    assert a.evict_lru_blocks(n_evictable) is True
    for b in list(sim.block_hash):
        if b not in sim.ref:
            sim.forget(b)
    sim.check()
    assert int(a.get_evictable_block_count()) == 0
    refs = a.block_ref_counts
    for rid in keep:
        for b in sim.requests[rid]:
            assert refs[b].item() >= 1


def test_availability_matches_allocation():
    """Requirement: `is_memory_available(n, potential_matched_count=m)` is True exactly when,
    after pinning m currently evictable matched blocks, `allocate_memory_blocks(n)` succeeds;
    with m = 0 it counts free plus all evictable cached blocks.

    The official test checks four calls on a 2-block cache; it never compares the answer
    with an actual allocation."""
    rng = random.Random(SEED + 3)
    checked = 0
    for trial in range(40):
        sim = Sim(total_count=32)
        systems = [[rng.randrange(10**6) for _ in range(rng.randrange(2, 6))] for _ in range(3)]
        live = _workload(sim, rng, rng.randrange(10, 60), systems)
        for rid in live[rng.randrange(len(live) + 1):]:
            sim.release(rid)
        # Pick a cached chain to "match": a root-to-node path of cached blocks.
        paths = []
        for h, b in sim.cached.items():
            path, cur = [], h
            while cur:
                path.append(sim.cached[cur])
                cur = sim.parent[cur]
            paths.append(path[::-1])
        path = rng.choice(paths) if paths else []
        m = sum(1 for b in path if b not in sim.ref)
        free, ev = sim.a.total_avail, len(sim.evictable())
        for n in sorted({0, 1, free, free + ev - m, free + ev - m + 1, free + ev}):
            if n < 0:
                continue
            said = sim.a.is_memory_available(n, potential_matched_count=m)
            assert bool(said) == (free + ev - m >= n), (
                f"is_memory_available({n}, potential_matched_count={m}) = {said} with "
                f"{free} free and {ev} evictable blocks")
        # Now really pin the path and allocate the largest amount that was reported available.
        n = max(0, free + ev - m)
        if path:
            _pin(sim.a, torch.tensor(path, dtype=torch.int32))
        if n:
            res = sim.a.allocate_memory_blocks(n)
            assert res is not None, f"allocation of {n} blocks failed after is_memory_available said yes"
            got = set(res.clone().tolist())
            assert not got & set(path), "a pinned matched block was evicted and handed out"
        assert sim.a.allocate_memory_blocks(1) is None
        checked += 1
    assert checked == 40
