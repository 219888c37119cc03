"""Memory probe: the allocator's footprint depends on the pool and the live sequences,
never on how many requests it has served."""
# INFRADEV-PROBE-CANARY-9f2c4e7a1b

import random
import zlib

from infradev_probe import subject

PROBE_SECRET = "PROBE-SECRET-memory-a93f0b64"
SEED = zlib.crc32(PROBE_SECRET.encode())

minicache = subject.module("minicache")


def _import_now():
    """Imports minicache in the subject at collection, so that no test's measurement
    includes the import. Tests reach every name through the module proxy, which re-imports
    in a new subject after a crash: a handle kept from an earlier subject would be stale."""
    try:
        subject.describe(minicache)
    except Exception:
        pass  # the tests meet the error again and report it


_import_now()

# 20k allocate/append/free cycles. An implementation that keeps anything per request (a
# history of prompts, per-call statistics, a dict keyed by sequence id that is never
# pruned) grows without bound. The prompts cross to the subject as new objects on every
# call, so keeping just a copy of each ~60-token prompt keeps its ~60 int objects alive too:
# ~2.4 KB a call, ~45 MiB here.
#
# The budget (probes.toml peak_memory_mb) is enforced by the broker from outside: the
# subject's peak memory (its container's cgroup, or the process's RSS high-water mark on the
# local executor) above its level when this test starts. The calls go in batches of
# CHUNK cycles, so the subject holds at most one batch's decoded requests (~0.5 MiB) at a
# time and the workload is not dominated by round trips.
CYCLES = 20_000
CHUNK = 64


def test_history_is_bounded():
    """Requirement: serving many short requests in a row (allocate a prompt that shares a
    cached system prefix, append a token, free) uses bounded memory: freed sequences leave
    nothing behind except the fixed per-block cache index.

    The official tests run a handful of calls each and cannot see per-call growth; the
    budget (peak_memory_mb) is enforced by the broker around this test."""
    rng = random.Random(SEED)
    system = [rng.randrange(32000) for _ in range(32)]
    prompts = [system + [rng.randrange(32000) for _ in range(16 + 4 * k)] for k in range(8)]
    alloc = minicache.BlockAllocator(num_blocks=64, block_size=16)
    for start in range(0, CYCLES, CHUNK):
        with subject.batch() as b:
            for i in range(start, min(start + CHUNK, CYCLES)):
                b.call(alloc.allocate, i, prompts[i % len(prompts)])
                b.call(alloc.append_tokens, i, [i % 32000])
                b.call(alloc.free, i)
        b.results  # raises the first error the subject raised
    assert alloc.num_free_blocks() == 64
