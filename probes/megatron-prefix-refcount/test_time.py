"""Time probe: a batched release of shared blocks costs time proportional to the released ids,
not to the pool size (no pool-sized bincount/mask per release)."""
# INFRADEV-PROBE-CANARY-2c8e51f0d94b

import random

import torch

from _context import fake_context, import_now, kept
from infradev_probe import subject, workload_seed

PROBE_SECRET = "PROBE-SECRET-refcount-time-a07e"
SEED = workload_seed(PROBE_SECRET)

kv_block_allocator = subject.module("megatron.core.inference.contexts.kv_block_allocator")
config = subject.module("megatron.core.inference.config")
import_now(kv_block_allocator, config)

SMALL = 4_096
LARGE = 4_194_304
ROUNDS = 150


def _release_time(total_count, rng):
    """Subject time of ROUNDS batched releases, each of 4 owners sharing a 6-block prefix plus
    2 private blocks per owner, on a REF_ZERO allocator of `total_count` blocks."""
    a = kv_block_allocator.KVBlockAllocator(
        fake_context(), total_count=total_count, paused_count=1, enable_prefix_caching=True,
        prefix_caching_eviction_policy=config.PrefixCachingEvictionPolicy.REF_ZERO)
    refs = kept(a, "block_ref_counts")
    batches = []
    for r in range(ROUNDS):
        ids = [int(x) for x in a.allocate_memory_blocks(14).tolist()]
        shared, private = ids[:6], ids[6:]
        a.register_kv_block_hashes(shared, [r * 16 + i + 1 for i in range(6)])
        refs[torch.tensor(shared, dtype=torch.int64)] += 3  # four owners in all
        blocks = shared * 4 + private
        rng.shuffle(blocks)
        batches.append(torch.tensor(blocks, dtype=torch.int32))
    with subject.batch() as b:  # one round trip: the subject time is the releases alone
        for blocks in batches:
            b.call(a.release_memory_blocks, blocks)
    b.results
    elapsed = subject.last_subject_ns / 1e9
    assert int(a.total_avail) == total_count - 1, "a batched release left blocks referenced"
    return elapsed


def test_release_cost_independent_of_pool_size():
    """Requirement: 150 batched releases of shared blocks take at most 4x as long with a
    4M-block pool as with a 4K-block pool, plus 0.15 s: the cost of a release is proportional
    to the released ids, not to the pool.

    The official tests use 8-block pools, where a pool-sized bincount is as fast as a
    scatter over the released ids."""
    rng = random.Random(SEED)
    small = min(_release_time(SMALL, rng) for _ in range(2))
    large = _release_time(LARGE, rng)
    assert large <= 4 * small + 0.15, (
        f"releases took {large:.3f} s with a {LARGE}-block pool vs {small:.3f} s with "
        f"{SMALL} blocks: release work grows with the pool size")
