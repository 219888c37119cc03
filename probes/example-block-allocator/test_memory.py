"""Memory probe: the allocator's footprint depends on the pool and the live sequences,
never on how many requests it has served."""
# INFRADEV-PROBE-CANARY-9f2c4e7a1b

import random
import zlib

from minicache import BlockAllocator

PROBE_SECRET = "PROBE-SECRET-memory-a93f0b64"
SEED = zlib.crc32(PROBE_SECRET.encode())

# 20k allocate/append/free cycles. An implementation that keeps anything per request (a
# history of prompts, per-call statistics, a dict keyed by sequence id that is never
# pruned) grows without bound: keeping just a copy of each ~60-token prompt costs ~0.6 KB a
# call, ~12 MiB here. The reference's tracemalloc peak for this call is ~0.02 MiB (64
# blocks of bookkeeping, one live sequence), so the 4 MiB budget in probes.toml leaves
# ~150x headroom for interpreter noise while catching a leak of ~200 bytes a call.
# Kept at 20k cycles because tracemalloc slows this allocation-heavy loop ~6x: the
# reference takes ~2 s traced on a loaded 2-core machine, well below test_timeout_s (20 s).
CYCLES = 20_000


def test_history_is_bounded():
    """Requirement: serving many short requests in a row (allocate a prompt that shares a
    cached system prefix, append a token, free) uses bounded memory: freed sequences leave
    nothing behind except the fixed per-block cache index.

    The official tests run a handful of calls each and cannot see per-call growth; the
    budget (peak_memory_mb) is enforced by the grader's plugin around this call."""
    rng = random.Random(SEED)
    system = [rng.randrange(32000) for _ in range(32)]
    prompts = [system + [rng.randrange(32000) for _ in range(16 + 4 * k)] for k in range(8)]
    alloc = BlockAllocator(num_blocks=64, block_size=16)
    for i in range(CYCLES):
        alloc.allocate(i, prompts[i % len(prompts)])
        alloc.append_tokens(i, [i % 32000])
        alloc.free(i)
    assert alloc.num_free_blocks() == 64
