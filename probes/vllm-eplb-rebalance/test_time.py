"""Time probe: the cost of rearrange_expert_weights_inplace grows with the number of expert
slots, not with its square. Same number of (layer, slot) pairs twice: 128 layers of 16 slots
and 1 layer of 2048 slots, in a world-size-1 gloo group in the subject (every move is a local
copy, so no network time is measured)."""
# INFRADEV-PROBE-CANARY-5e0b7c1f2a93

import random

import torch
from infradev_probe import subject, workload_seed

import _eplb as E

PROBE_SECRET = "PROBE-SECRET-eplb-time-51c2"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

rebalance_execute = subject.module("vllm.distributed.eplb.rebalance_execute")
dist = subject.module("torch.distributed")
cuda = subject.module("torch.cuda")


def _import_now():
    """Imports the module in the subject at collection, so that no measurement includes the
    import (vllm.distributed takes seconds)."""
    try:
        subject.describe(rebalance_execute)
    except Exception:
        pass  # the test meets the error again and reports it


_import_now()

SHAPES = {"many small layers": (16, 128), "one large layer": (2048, 1)}  # (slots, layers)
H1, A, B = 8, 1, 8  # tiny rows: the copies are cheap, the bookkeeping is what is measured
REPS = 3


def test_cost_linear_in_slots():
    """Requirement: rearranging 1 layer of 2048 expert slots costs at most 2x what rearranging
    128 layers of 16 slots costs (the same 2048 (layer, slot) pairs; random maps with
    replicas and empty slots, world size 1, best of 3 interleaved rounds of old -> new ->
    old), and both end with the right weights: the per-layer bookkeeping is linear (or
    n log n) in the number of slots, not a scan of the whole map per expert.

    Time is the broker's subject time of the batches holding the two rearrangements, so
    round trips are not counted. Measured on a 2-core host: the reference 0.56-0.65x, the
    base (per-expert scans of the map) 5.3-5.9x; 2x leaves a factor of ~3 either side.

    The official tests never time the rearrangement, and the CPU ones never call it."""
    rng = random.Random(SEED)
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    cuda.synchronize = cuda.is_available  # no GPU in the sandbox (prompt: "Testing on CPU")
    group = dist.group.WORLD
    fn = rebalance_execute.rearrange_expert_weights_inplace
    cases = {}
    for name, (slots, layers) in SHAPES.items():
        num_logical = slots * 3 // 4
        base = E.expert_table(SEED + slots, layers, num_logical, H1, A, B)
        old = [E.random_map(rng, 1, slots, num_logical, p_empty=0.1) for _ in range(layers)]
        new = [E.random_map(rng, 1, slots, num_logical, p_empty=0.1) for _ in range(layers)]
        handle = subject.put(E.rank_weights(base, old, 0, slots))
        cases[name] = (base, old, new, handle, slots)
    best = {name: float("inf") for name in SHAPES}
    for _ in range(REPS):  # interleaved, so that a change in the machine's load hits both
        for name, (base, old, new, handle, slots) in cases.items():
            o = torch.tensor(old, dtype=torch.int64)
            n = torch.tensor(new, dtype=torch.int64)
            with subject.batch() as b:
                b.call(fn, o, n, handle, group)
                b.call(fn, n, o, handle, group)
            best[name] = min(best[name], subject.last_subject_ns / 1e9)
            b.results  # raises the first error the subject raised
    for name, (base, old, new, handle, slots) in cases.items():
        E.check_rank_weights(subject.fetch(handle), base, old, 0, slots, name)
    small, large = best["many small layers"], best["one large layer"]
    assert large < 2.0 * small + 0.02, (
        f"1 x 2048 slots: {large:.3f}s vs 128 x 16 slots: {small:.3f}s for the same slot count")
