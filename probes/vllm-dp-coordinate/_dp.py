"""Judge-side model of the DP coordination (plain Python: no vLLM in the judge), and the
per-rank workloads of the probes."""
# INFRADEV-PROBE-CANARY-3c7a91e04b6d

import bisect
import itertools

DECODE_THR = 16    # dbo_decode_token_threshold of the probes' ParallelConfig
PREFILL_THR = 64   # dbo_prefill_token_threshold


def attempts(step, enable_dbo):
    """Whether this rank wants to micro-batch (before coordination)."""
    if not (enable_dbo and step["allow"]):
        return False
    thr = DECODE_THR if step["uniform"] else PREFILL_THR
    return step["unpadded"] >= thr


def ubatch_slices(num_sched, split):
    """The two micro-batches of one rank split at token `split`: ((req_start, req_stop),
    (tok_start, tok_stop)) each; a request that straddles the split is in both."""
    cu = [0] + list(itertools.accumulate(num_sched))
    first_req_stop = bisect.bisect_left(cu, split)
    second_req_start = bisect.bisect_right(cu, split) - 1
    return [((0, first_req_stop), (0, split)),
            ((second_req_start, len(num_sched)), (split, cu[-1]))]


def coordinate(steps, enable_dbo):
    """steps[r]: rank r's inputs of one step. Returns (should_ubatch, padded count of every
    rank, [per-rank slices or None])."""
    maxp = max(s["padded"] for s in steps)
    mino = min(s["unpadded"] for s in steps)
    ub = all(attempts(s, enable_dbo) for s in steps) and not (maxp // 2 >= mino)
    slices = [ubatch_slices(s["num_sched"], maxp // 2) if ub else None for s in steps]
    return ub, maxp, slices


def _rank_step(rng, kind, lo, hi):
    uniform = kind == "decode"
    if uniform:
        q = rng.choice([1, 1, 2, 4])
        n = max(1, rng.randint(lo, hi) // q)
        num_sched = [q] * n
    else:
        total = rng.randint(lo, hi)
        num_sched = []
        while sum(num_sched) < total:
            num_sched.append(rng.randint(1, max(1, total // 3)))
    unpadded = sum(num_sched)
    pad = rng.choice([0, 0, rng.randint(1, 7), (-unpadded) % 8, (-unpadded) % 32])
    return {"num_sched": num_sched, "unpadded": unpadded, "padded": unpadded + pad,
            "allow": True, "uniform": uniform}


def workload(rng, world, n):
    """n steps of per-rank inputs mixing every outcome: all ranks micro-batch; one rank
    below its threshold or not allowed to; the largest padded half reaching the smallest
    rank (micro-batching aborted); idle-ish ranks with few tokens."""
    out = []
    for i in range(n):
        regime = rng.choice(["balanced", "balanced", "one_small", "one_off", "skewed", "tiny"])
        kind = rng.choice(["prefill", "decode"])
        lo, hi = (80, 400) if kind == "prefill" else (24, 200)
        if regime == "balanced":
            base = rng.randint(lo, hi)
            steps = [_rank_step(rng, kind, base, int(base * 1.6)) for _ in range(world)]
        elif regime == "skewed":
            steps = [_rank_step(rng, kind, lo, hi) for _ in range(world)]
            steps[rng.randrange(world)] = _rank_step(rng, kind, 4 * hi, 6 * hi)
        elif regime == "tiny":
            steps = [_rank_step(rng, kind, 1, 12) for _ in range(world)]
        else:
            base = rng.randint(lo, hi)
            steps = [_rank_step(rng, kind, base, int(base * 1.5)) for _ in range(world)]
            r = rng.randrange(world)
            if regime == "one_off":
                steps[r]["allow"] = False
            else:
                steps[r] = _rank_step(rng, kind, 1, (DECODE_THR if kind == "decode" else PREFILL_THR) - 1)
        out.append(steps)
    return out
