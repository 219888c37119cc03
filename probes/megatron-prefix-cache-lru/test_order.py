"""Eviction-order probe: repeated `evict_lru_blocks` calls on a large cached forest, with
blocks touched (pinned, re-stamped, unpinned) and new chains registered between calls, must
evict exactly what descendant-first LRU predicts, computed here from scratch each round."""
# INFRADEV-PROBE-CANARY-770e89b93619

import random

import torch

from _context import fake_context, import_now, kept
from infradev_probe import subject, workload_seed

PROBE_SECRET = "PROBE-SECRET-lru-order-91ce"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

kv_block_allocator = subject.module("megatron.core.inference.contexts.kv_block_allocator")
config = subject.module("megatron.core.inference.config")
import_now(kv_block_allocator, config)


def _reference(cached, parent_of, ts, k):
    """Evict k blocks: always the cached block without cached children that has the
    smallest (timestamp, block id); a parent becomes eligible once its children are gone.
    A plain O(k * n) rescan, independent of any heap bookkeeping."""
    alive = set(cached)
    out = []
    for _ in range(k):
        has_child = {parent_of[b] for b in alive if parent_of[b] in alive}
        leaves = [b for b in alive if b not in has_child]
        b = min(leaves, key=lambda x: (ts[x], x))
        out.append(b)
        alive.discard(b)
    return out


def test_repeated_evictions_match_reference():
    """Requirement: over 60 rounds on a 600-block pool, each `evict_lru_blocks(k)` removes
    exactly the k blocks that descendant-first LRU selects (evictable leaf with the oldest own
    timestamp, ties by smaller block id, parents eligible once childless), even after earlier
    evictions, timestamp refreshes via `update_timestamps`, and re-registration of evicted
    block ids under new parents.

    The official property test builds a fresh forest of at most 9 blocks for every single
    eviction call; stale child counts or parent links left over from earlier rounds or from
    reused block ids are invisible to it."""
    rng = random.Random(SEED)
    total = 601
    clock = [1]  # the context's prefix_cache_lru_clock, set by the probe alone
    ctx = fake_context(clock=clock[0])
    a = kv_block_allocator.KVBlockAllocator(
        ctx, total_count=total, paused_count=1, enable_prefix_caching=True,
        prefix_caching_eviction_policy=config.PrefixCachingEvictionPolicy.LRU)
    next_hash = [1]
    hash_of, parent_of, ts = {}, {}, {}

    def tick(n):
        clock[0] += n
        ctx.prefix_cache_lru_clock = clock[0]

    def grow(n_blocks):
        """Allocate n blocks (no eviction needed) and register them as new chains hanging
        off random existing cached blocks or as new roots, then release them (cached). The
        registrations and stamps go in one batch, in order."""
        tick(1)
        ids = [int(x) for x in a.allocate_memory_blocks(n_blocks).clone().tolist()]
        stamps = kept(a, "block_timestamps")
        batch = subject.batch()
        i = 0
        while i < len(ids):
            length = min(len(ids) - i, rng.randrange(1, 6))
            chain = ids[i:i + length]
            i += length
            anchors = [b for b in hash_of if b not in chain]
            p_block = rng.choice(anchors) if anchors and rng.random() < 0.7 else -1
            hs, ps = [], []
            prev_hash = hash_of[p_block] if p_block >= 0 else 0
            prev_block = p_block
            for b in chain:
                h = next_hash[0]
                next_hash[0] += 1
                hs.append(h)
                ps.append(prev_hash)
                hash_of[b] = h
                parent_of[b] = prev_block
                ts[b] = clock[0] + rng.randrange(0, 3)
                prev_hash, prev_block = h, b
            batch.call(a.register_kv_block_hashes, chain, hs, ps)
            # Distinct per-block recency inside the chain (set directly, as the official
            # tests do) so the order is not only decided by block ids.
            batch.setitem(stamps, torch.tensor(chain), torch.tensor([ts[b] for b in chain]))
        batch.run()
        batch.results  # raises the first error the subject raised
        a.release_memory_blocks(torch.tensor(ids, dtype=torch.int32))

    grow(total - 1)
    for rnd in range(60):
        # Touch some cached blocks: pin, refresh the stamp, unpin (a prefix hit that finished).
        tick(10)
        touched = rng.sample(sorted(hash_of), k=min(len(hash_of), rng.randrange(0, 12)))
        # A real prefix hit touches a whole root-to-node path.
        path = set()
        for b in touched:
            while b >= 0 and b not in path:
                path.add(b)
                b = parent_of[b]
        if path:
            pt = torch.tensor(sorted(path), dtype=torch.int32)
            refs = kept(a, "block_ref_counts")  # in place, in the subject
            refs[pt] += 1
            a.update_timestamps(pt)
            refs[pt] -= 1
            for b in path:
                ts[b] = clock[0]
        k = rng.randrange(1, 40)
        want = _reference(list(hash_of), parent_of, ts, k)
        assert a.evict_lru_blocks(k) is True
        for b in want:
            del hash_of[b]
        for b in list(parent_of):
            if b not in hash_of:
                del parent_of[b]
                ts.pop(b, None)
        got = set(dict(a.kv_hash_to_block_id).values())
        assert got == set(hash_of), (
            f"round {rnd}: evict_lru_blocks({k}) evicted {sorted(set(want) | (got ^ set(hash_of)))}"
            f" but descendant-first LRU evicts {sorted(want)}")
        for b, p in parent_of.items():
            assert p < 0 or p in hash_of, f"round {rnd}: block {b} orphaned"
        # Reuse the freed ids for new chains (evicted ids come back with new parents).
        grow(a.total_avail)
