"""Time probe: handing out and taking back blocks is O(1) in the pool size, including the
LRU eviction of cached blocks."""
# INFRADEV-PROBE-CANARY-9f2c4e7a1b

import collections

from minicache import BlockAllocator

PROBE_SECRET = "PROBE-SECRET-time-7c24e1d9"

# Workload: 20k sequences of 64 distinct tokens (4 full blocks each, 80k block hand-outs)
# through a 4096-block pool with at most 64 live sequences. After the first ~1000
# sequences every block is cached, so every hand-out evicts the least recently freed one.
#
# Reference (deque + OrderedDict, O(1) per block): ~0.25 s idle, <= ~0.6 s on a loaded
# 2-core machine (load average 3). A linear scan over the free list or over the evictable
# pool per hand-out (min(), list.remove, a sort) costs O(4096) per block: ~40-70 s for this
# workload, 100x+ the reference.
# Budget (probes.toml): wall_time_s = 3.0, ~5x the worst reference time seen and >10x
# below any linear implementation; the plugin interrupts a slow call at 2 * 3 + 1 = 7 s,
# so a linear implementation fails in bounded time with TimeBudgetExceeded.
NUM_SEQUENCES = 20_000
NUM_BLOCKS = 4096
TOKENS_PER_SEQ = 64
LIVE = 64


def test_allocate_free_is_constant_time():
    """Requirement: allocate / free cost O(blocks touched), independent of the pool size:
    the next free block and the LRU evictable block are found in O(1).

    The official tests use pools of at most 8 blocks, where a linear scan is as fast as a
    queue; the budget (wall_time_s) is enforced by the grader's plugin around this call."""
    alloc = BlockAllocator(num_blocks=NUM_BLOCKS, block_size=16)
    live = collections.deque()
    for seq_id in range(NUM_SEQUENCES):
        start = seq_id * TOKENS_PER_SEQ  # distinct tokens: no prefix hits
        alloc.allocate(seq_id, range(start, start + TOKENS_PER_SEQ))
        live.append(seq_id)
        if len(live) > LIVE:
            alloc.free(live.popleft())
    while live:
        alloc.free(live.popleft())
    assert alloc.num_free_blocks() == NUM_BLOCKS
