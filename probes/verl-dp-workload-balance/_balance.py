"""Shared by the probes (not a probe itself): the workload model, batches built in a subject,
and the checks every scenario applies to what rearrange_micro_batches returns.

Everything expected is computed here, in the judge, from the sequence lengths alone; the
submission's own partitioner is only ever used as the bar to meet (see `oracle_max`)."""
# INFRADEV-PROBE-CANARY-3a4a26899ba4

import torch

# The prompt's FLOP proxy of one sequence of s tokens (dense block, hidden size 4096,
# 12 h^2 s + 2 h s^2 divided by 2h): 24576 s + s^2. Computed with Python ints (exact).
LINEAR = 24576


def workload(s):
    return LINEAR * s + s * s


def workloads(lens):
    return [workload(int(s)) for s in lens]


def ceildiv(a, b):
    return -(a // -b)


def lower_bound(ws, k):
    """No split of these items into k groups has a heaviest group lighter than this: the mean,
    and (pigeonhole) for every j >= 0 the j + 1 lightest of the j*k + 1 heaviest items, some
    group holding j + 1 of those (j = 0: the heaviest item)."""
    top = sorted(ws, reverse=True)
    best = sum(ws) / k
    j = 0
    while j * k + 1 <= len(top):
        best = max(best, sum(top[j * k - j: j * k + 1]))
        j += 1
    return best


def mountain(sums):
    """Micro-batch order the prompt asks for: heaviest in the middle (position ceil(k/2) - 1),
    the 3rd, 5th... heaviest stepping towards the front, the 2nd, 4th... towards the back."""
    d = sorted(sums, reverse=True)
    return d[0::2][::-1] + d[1::2]


def rank_order(ws):
    """Per-rank sample order the prompt asks for (lightest first, second lightest last):
    a1, a3, a5, ..., a6, a4, a2 of the rank's workloads sorted ascending."""
    a = sorted(ws)
    return a[0::2] + a[1::2][::-1]


def lengths(rng, n, p_long=0.3, long=(16384, 49152), short=(128, 4096)):
    """A long-tailed RL batch: most responses short, ~30% long (where s^2 matters: at 32k
    tokens the quadratic term already exceeds the linear one)."""
    return [rng.randint(*long) if rng.random() < p_long else rng.randint(*short) for _ in range(n)]


def padded_tensors(s, lens, width, offsets=None):
    """(input_ids, attention_mask) of shape (n, width) built IN the subject `s` (the subject or
    one rank) so no (n, width) tensor crosses the wire: row i has lens[i] ones starting at
    offsets[i] (left padding before them, right padding after), and its input_ids are i + 1 on
    those tokens (0 elsewhere), so every row says where it came from."""
    n = len(lens)
    offsets = [0] * n if offsets is None else offsets
    assert all(o + l <= width for o, l in zip(offsets, lens))
    rt, op = s.module("torch"), s.module("operator")
    start = s.put(torch.tensor(offsets, dtype=torch.int64).unsqueeze(1))
    end = s.put(torch.tensor([o + l for o, l in zip(offsets, lens)], dtype=torch.int64).unsqueeze(1))
    cols = s.keep(rt.arange, width)
    inside = s.keep(op.and_, s.keep(op.ge, cols, start), s.keep(op.lt, cols, end))
    mask = s.keep(inside.long)
    rows = s.put(torch.arange(1, n + 1, dtype=torch.int64).unsqueeze(1))
    ids = s.keep(op.mul, mask, rows)
    return ids, mask


def padded_batch(s, lens, width, offsets=None):
    """The TensorDict rearrange_micro_batches takes: input_ids and attention_mask (above)."""
    ids, mask = padded_tensors(s, lens, width, offsets)
    td = s.module("tensordict")
    return s.keep(td.TensorDict, {"input_ids": ids, "attention_mask": mask}, batch_size=[len(lens)])


def random_offsets(rng, lens, width):
    return [rng.randint(0, width - l) for l in lens]


def expected_count(lens, max_token_len, min_num=None):
    """The local number of micro-batches before any DP agreement: enough for max_token_len on
    average, at most one per sequence, at least min_num."""
    k = min(len(lens), ceildiv(sum(lens), max_token_len))
    if min_num is not None:
        k = max(k, min_num)
    return k


def unpack(out):
    """(micro_batches, micro_bsz_idx) as rearrange_micro_batches returns them."""
    assert isinstance(out, (tuple, list)) and len(out) == 2, "returns (micro_batches, index lists)"
    mbs, idx = out
    assert isinstance(idx, list) and all(isinstance(p, list) for p in idx), "index lists are lists"
    assert all(type(i) is int for p in idx for i in p), "indices are Python ints"
    assert isinstance(mbs, list) and len(mbs) == len(idx), "one micro-batch per index list"
    return mbs, idx


def check_cover(idx, n, k, what):
    flat = sorted(i for p in idx for i in p)
    assert flat == list(range(n)), f"{what}: every index exactly once"
    assert len(idx) == k, f"{what}: {len(idx)} micro-batches, expected {k}"
    assert all(p for p in idx), f"{what}: an empty micro-batch"


def oracle_max(partitioner, ws, k, equal_size):
    """The heaviest group the existing Karmarkar-Karp partitioner makes of these workloads
    (called in the submission's process: the bar to meet, not the answer to copy)."""
    parts = partitioner(list(ws), k_partitions=k, equal_size=equal_size)
    return max(sum(ws[i] for i in p) for p in parts)


def check_balance(idx, ws, bar, what, slack=1.5):
    """The heaviest micro-batch is no heavier than the partitioner's on the workloads (a
    token-balanced split is heavier on long-tailed batches), and within `slack` of the
    lower bound: a sanity bar independent of the submission's own partitioner (the bound is
    not tight for a few items: the partitioner reaches 1.22x of it on 1 of 2000 batches of the
    micro-batch probes' family, never more)."""
    sums = [sum(ws[i] for i in p) for p in idx]
    assert max(sums) <= bar, (
        f"{what}: heaviest micro-batch {max(sums)} > {bar}, what balancing these FLOP workloads "
        f"gives: not balanced by workload")
    assert max(sums) <= slack * lower_bound(ws, len(idx)), f"{what}: far from balanced"
    return sums


def check_rows(s, mbs, idx, lens, what):
    """Each micro-batch holds exactly the rows its index list names, in that order (a row of
    length 0 carries no marker)."""
    op = s.module("operator")
    for j, (mb, part) in enumerate(zip(mbs, idx)):
        ids = s.keep(op.getitem, mb, "input_ids")
        got = ids.amax(1)
        assert isinstance(got, torch.Tensor), f"{what}: input_ids of micro-batch {j}"
        want = [i + 1 if lens[i] > 0 else 0 for i in part]
        assert got.tolist() == want, f"{what}: micro-batch {j} rows != its indices"
