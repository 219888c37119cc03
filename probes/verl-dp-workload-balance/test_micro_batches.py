"""Probes of rearrange_micro_batches on one process (no process group): micro-batches balanced
by FLOP workload rather than by tokens, their order (lightest at both ends), and the edge
cases of dynamic batching."""
# INFRADEV-PROBE-CANARY-3a4a26899ba4

import random

import pytest
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

PROBE_SECRET = "PROBE-SECRET-dpwb-microbatch-3b5b"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

seqlen_balancing = subject.module("verl.utils.seqlen_balancing")

# Workload: 10 long-tailed batches of 24-36 sequences (~30% of 16k-48k tokens, the rest
# 128-4k) with max_token_len = the padded length + 0-16k, i.e. 3-9 micro-batches each.
# Measured on the partitioner itself (600 batches of this family): balancing token counts
# leaves the heaviest micro-batch heavier than balancing workloads in 64% of the batches, so
# a token-balanced submission passes all 10 with probability < 1e-4; balancing workloads
# stays within 1.22x of the lower bound on 2000 batches (the sanity bar is 1.5x).
BATCHES = 10


def _scenarios(rng, count):
    out = []
    for _ in range(count):
        lens = lengths(rng, rng.randint(24, 36))
        width = max(lens) + rng.randint(0, 512)
        mtl = width + rng.randint(0, 16384)  # never below the padded length
        out.append((lens, mtl, width, random_offsets(rng, lens, width)))
    return out


def test_micro_batches_balanced_by_workload():
    """Requirement: `rearrange_micro_batches` (no process group) splits long-tailed batches into
    min(n, ceil(total tokens / max_token_len)) micro-batches covering every index once, each
    holding exactly the rows its index list names, with the heaviest micro-batch (in
    24576*s + s^2 workload) no heavier than what the existing partitioner
    `get_seqlen_balanced_partitions(workloads, k, equal_size=False)` makes, with
    use_dynamic_bsz_balance True and False; a second call on the same batch returns the same
    index lists.

    No official test looks at how balanced the micro-batches are: they only check that
    concatenating and restoring the micro-batches gives the batch back."""
    rng = random.Random(SEED)
    rearrange = seqlen_balancing.rearrange_micro_batches
    partitioner = seqlen_balancing.get_seqlen_balanced_partitions
    for b, (lens, mtl, width, offsets) in enumerate(_scenarios(rng, BATCHES)):
        batch = padded_batch(subject, lens, width, offsets)
        ws = workloads(lens)
        k = expected_count(lens, mtl)
        bar = oracle_max(partitioner, ws, k, equal_size=False)
        for flag in (True, False):
            what = f"batch {b} (n={len(lens)}, use_dynamic_bsz_balance={flag})"
            mbs, idx = unpack(rearrange(batch, max_token_len=mtl, use_dynamic_bsz_balance=flag))
            check_cover(idx, len(lens), k, what)
            check_balance(idx, ws, bar, what)
            if b < 3:
                check_rows(subject, mbs, idx, lens, what)
            _, again = unpack(rearrange(batch, max_token_len=mtl, use_dynamic_bsz_balance=flag))
            assert again == idx, f"{what}: the same batch split differently on a second call"


def test_micro_batch_order_lightest_at_both_ends():
    """Requirement: with use_dynamic_bsz_balance=True (the default) the micro-batches come in
    the prompt's order of their total workloads: the heaviest at position ceil(k/2)-1, the 3rd,
    5th... heaviest stepping towards the front and the 2nd, 4th... towards the back (the two
    lightest at the two ends), for 1 to 9 micro-batches.

    No official test looks at the order of the micro-batches."""
    rng = random.Random(SEED + 1)
    rearrange = seqlen_balancing.rearrange_micro_batches
    for b, (lens, mtl, width, offsets) in enumerate(_scenarios(rng, 6)):
        batch = padded_batch(subject, lens, width, offsets)
        ws = workloads(lens)
        for min_mb in (None, 1, 2, 3, 4, 9):
            what = f"batch {b} (n={len(lens)}, min_num_micro_batch={min_mb})"
            _, idx = unpack(rearrange(batch, max_token_len=mtl, min_num_micro_batch=min_mb))
            check_cover(idx, len(lens), expected_count(lens, mtl, min_mb), what)
            sums = [sum(ws[i] for i in p) for p in idx]
            assert sums == mountain(sums), (
                f"{what}: micro-batch workloads in the wrong order (heaviest in the middle, "
                f"lightest at both ends)")
    # a batch that fits one micro-batch
    batch = padded_batch(subject, [5, 6, 7], 8)
    _, idx = unpack(rearrange(batch, max_token_len=64))
    assert sorted(idx[0]) == [0, 1, 2] and len(idx) == 1


def _edge(lens, width=None, **kw):
    width = width or max(max(lens), 1)
    batch = padded_batch(subject, lens, width)
    out = unpack(seqlen_balancing.rearrange_micro_batches(batch, **kw))
    return batch, out


def test_edge_cases():
    """Requirement: equal lengths (10 x 300 tokens, max_token_len 1000: 3 micro-batches of 4,
    3, 3 sequences ordered 3-4-3), one sequence per micro-batch when max_token_len equals the
    longest sequence, min_num_micro_batch equal to the batch size, num_batches_divided_by
    rounding 5 micro-batches up to 8, a single sequence, zero-length padding rows, and the
    nested (remove-padding) layout all cover every index once with the prompt's count, order
    and balance; min_num_micro_batch above the batch size and max_token_len below the longest
    sequence raise AssertionError.

    The official tests use one random batch of 20 sequences and max_token_len 300 only."""
    rng = random.Random(SEED + 2)
    partitioner = seqlen_balancing.get_seqlen_balanced_partitions

    def full_check(lens, idx, k, what, bar=None):
        check_cover(idx, len(lens), k, what)
        ws = workloads(lens)
        sums = [sum(ws[i] for i in p) for p in idx]
        assert sums == mountain(sums), f"{what}: micro-batch order"
        if bar is None and k > 1:
            bar = oracle_max(partitioner, ws, k, equal_size=False)
        if bar is not None:
            check_balance(idx, ws, bar, what)

    lens = [300] * 10
    _, (_, idx) = _edge(lens, max_token_len=1000)
    full_check(lens, idx, 3, "10 equal lengths")
    assert [len(p) for p in idx] == [3, 4, 3], "10 equal lengths in 3 micro-batches: sizes 3, 4, 3"

    lens = [rng.randint(1000, 4000) for _ in range(7)]
    _, (mbs, idx) = _edge(lens, max_token_len=max(lens))
    k = expected_count(lens, max(lens))
    full_check(lens, idx, k, "max_token_len = longest sequence")

    lens = [rng.randint(1, 512) for _ in range(9)]
    batch, (mbs, idx) = _edge(lens, max_token_len=100_000, min_num_micro_batch=9)
    full_check(lens, idx, 9, "min_num_micro_batch = batch size")
    assert sorted(len(p) for p in idx) == [1] * 9
    check_rows(subject, mbs, idx, lens, "min_num_micro_batch = batch size")

    lens = [rng.randint(200, 2000) for _ in range(16)]
    mtl = -(-sum(lens) // 5)
    mtl = max(mtl, max(lens))
    natural = expected_count(lens, mtl)
    _, (_, idx) = _edge(lens, max_token_len=mtl, num_batches_divided_by=4)
    full_check(lens, idx, -(-natural // 4) * 4, "num_batches_divided_by=4")

    _, (_, idx) = _edge([77], max_token_len=128)
    assert idx == [[0]], "a single sequence is one micro-batch"

    lens = [0, 900, 0, 40, 3000, 0, 1200, 2500, 0, 10]
    _, (mbs, idx) = _edge(lens, width=3000, max_token_len=3000)
    full_check(lens, idx, expected_count(lens, 3000), "zero-length padding rows")
    check_rows(subject, mbs, idx, lens, "zero-length padding rows")

    # The remove-padding layout: input_ids a jagged nested tensor, no attention_mask.
    rt = subject.module("torch")
    lens = [rng.randint(1, 3000) for _ in range(12)]
    pieces = [subject.keep(rt.full, (s,), i + 1) for i, s in enumerate(lens)]
    nested = subject.keep(rt.nested.as_nested_tensor, pieces, layout=rt.jagged)
    td = subject.keep(subject.module("tensordict").TensorDict, {"input_ids": nested}, batch_size=[len(lens)])
    _, idx = unpack(seqlen_balancing.rearrange_micro_batches(td, max_token_len=3000))
    full_check(lens, idx, expected_count(lens, 3000), "nested input_ids")

    batch = padded_batch(subject, [10, 20, 30], 30)
    with pytest.raises(AssertionError):
        seqlen_balancing.rearrange_micro_batches(batch, max_token_len=1000, min_num_micro_batch=4)
    with pytest.raises(AssertionError):
        seqlen_balancing.rearrange_micro_batches(batch, max_token_len=29)
