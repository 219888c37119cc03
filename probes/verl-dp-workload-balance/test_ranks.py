"""Probes across data-parallel ranks: rearrange_micro_batches in a real gloo group (the default
group as the DP group), each rank with its own batch. The ranks agree on one micro-batch count
with a single all-reduce per call, and each rank balances its own batch by workload."""
# INFRADEV-PROBE-CANARY-3a4a26899ba4

import random

from infradev_probe import subject, workload_seed

from _balance import (
    check_balance,
    check_cover,
    check_rows,
    expected_count,
    lengths,
    mountain,
    oracle_max,
    padded_batch,
    random_offsets,
    unpack,
    workloads,
)

PROBE_SECRET = "PROBE-SECRET-dpwb-ranks-16c7"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

SB = "verl.utils.seqlen_balancing"


def _roundup(a, b):
    return -(-a // b) * b


def _init(group):
    group.call_same("torch.distributed", "init_process_group", backend="gloo")


def _rearrange(group, batches, **kw):
    """rearrange_micro_batches on every rank at once, dp_group = the default (world) group."""
    fns = [rank.module(SB).rearrange_micro_batches for rank in group]
    worlds = [rank.module("torch.distributed").group.WORLD for rank in group]
    kwargs = [dict(kw, dp_group=worlds[r]) for r in range(len(group))]
    return [unpack(out) for out in group.call_each(fns, [(b,) for b in batches], kwargs)]


def test_dp_ranks_agree_and_balance_2_ranks():
    """Requirement: in a gloo group of 2 ranks whose batches differ (20 short sequences; 26
    with ~30% long ones), rearrange_micro_batches(dp_group=WORLD) gives every rank the
    largest of the ranks' own counts (with min_num_micro_batch=3 and num_batches_divided_by=4:
    that maximum rounded up to a multiple of 4), each rank covering its indices once, holding
    the right rows, balanced by workload at least as well as the existing partitioner, in the
    prompt's order; with same_micro_num_in_dp=False each rank keeps its own count; ranks given
    identical batches return identical index lists.

    The official distributed test needs two CUDA devices and NCCL, never checks balance or
    order, and gives both ranks the same length distribution."""
    _agree_and_balance(2)


def test_dp_ranks_agree_and_balance_4_ranks():
    """Requirement: as test_dp_ranks_agree_and_balance_2_ranks, in a group of 4 gloo ranks
    (20, 26, 32 and 38 sequences, from all-short to ~50% long).

    The official distributed test runs two ranks only, on CUDA with NCCL."""
    _agree_and_balance(4)


def _agree_and_balance(world):
    rng = random.Random(SEED + world)
    with subject.ranks(world) as group:
        _init(group)
        lens, batches, widths = [], [], []
        for r, rank in enumerate(group):
            rl = lengths(rng, 20 + 6 * r, p_long=0.0 if r == 0 else 0.2 + 0.1 * r)
            width = max(rl) + rng.randint(0, 256)
            lens.append(rl)
            widths.append(width)
            batches.append(padded_batch(rank, rl, width, random_offsets(rng, rl, width)))
        mtl = max(widths) + rng.randint(0, 8192)
        local = [expected_count(rl, mtl) for rl in lens]
        assert len(set(local)) > 1, "scenario: the ranks' own counts differ"
        partitioners = [rank.module(SB).get_seqlen_balanced_partitions for rank in group]

        def check(outs, counts, what, rows=False):
            for r, (mbs, idx) in enumerate(outs):
                w = f"{what}, rank {r}"
                ws = workloads(lens[r])
                check_cover(idx, len(lens[r]), counts[r], w)
                check_balance(idx, ws, oracle_max(partitioners[r], ws, counts[r], False), w)
                sums = [sum(ws[i] for i in p) for p in idx]
                assert sums == mountain(sums), f"{w}: micro-batch order"
                if rows:
                    check_rows(group[r], mbs, idx, lens[r], w)

        agreed = max(local)
        check(_rearrange(group, batches, max_token_len=mtl), [agreed] * world,
              "same_micro_num_in_dp=True", rows=True)
        check(_rearrange(group, batches, max_token_len=mtl, same_micro_num_in_dp=False), local,
              "same_micro_num_in_dp=False")
        forced = _roundup(max(max(k, 3) for k in local), 4)
        check(_rearrange(group, batches, max_token_len=mtl, min_num_micro_batch=3,
                         num_batches_divided_by=4), [forced] * world,
              "min_num_micro_batch=3, num_batches_divided_by=4")

        # The same batch on every rank: the same split on every rank (nothing depends on the
        # process: hash seeds, set order, the rank).
        same_lens = lengths(rng, 30, p_long=0.3)
        width = max(same_lens)
        same = [padded_batch(rank, same_lens, width) for rank in group]
        outs = _rearrange(group, same, max_token_len=width + 4096)
        first = outs[0][1]
        for r, (_, idx) in enumerate(outs):
            assert idx == first, f"rank {r} split an identical batch differently from rank 0"


# Traffic workload: 2 ranks, CALLS calls of rearrange_micro_batches with
# same_micro_num_in_dp=True on small batches (12 sequences of <= 64 tokens; rank 0's need 2-3
# micro-batches, rank 1's 7-12, so every call has to agree). One call needs exactly one
# all-reduce of one int64 (the count, MAX) over the DP group; nothing else of a call crosses
# between ranks.
CALLS = 150


def test_dp_agreement_is_one_small_all_reduce():
    """Requirement: agreeing on the micro-batch count costs one all-reduce of a single integer
    per call: 150 calls in a 2-rank gloo group (each with the right agreed count and every
    index once) stay within the traffic budget of the group's set-up plus 150 one-integer
    all-reduces.

    The official tests never measure what rearrange_micro_batches sends: a patch that gathers
    every rank's lengths or workloads, or runs the all-reduce twice, passes them."""
    rng = random.Random(SEED + 100)
    with subject.ranks(2) as group:
        _init(group)
        lens = [[rng.randint(1, 16) for _ in range(12)], [rng.randint(32, 64) for _ in range(12)]]
        batches = [padded_batch(rank, rl, 64) for rank, rl in zip(group, lens)]
        agreed = max(expected_count(rl, 64) for rl in lens)
        fns = [rank.module(SB).rearrange_micro_batches for rank in group]
        worlds = [rank.module("torch.distributed").group.WORLD for rank in group]
        kwargs = [{"max_token_len": 64, "dp_group": w, "same_micro_num_in_dp": True} for w in worlds]
        args = [(b,) for b in batches]
        for call in range(CALLS):
            outs = group.call_each(fns, args, kwargs)
            for r, out in enumerate(outs):
                _, idx = unpack(out)
                check_cover(idx, 12, agreed, f"call {call}, rank {r}")
