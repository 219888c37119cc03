"""Judge-side helpers for the EPLB probes: physical-to-logical maps (with replicas and empty
slots), expert weights keyed by logical expert id, the expected state after a rearrangement,
the expected point-to-point volume, and the slot-preservation checks of rebalance_experts.

Nothing here imports vllm: every expected value is computed from the probe's own inputs."""
# INFRADEV-PROBE-CANARY-5e0b7c1f2a93

import collections

import numpy as np
import torch

# Two weight tensors per MoE layer, as in a gated MLP: (E, H1) and (E, A, B) (a 3-D parameter,
# so a row is itself a matrix). float32 keeps the comparison bit-exact (the rows are copied,
# never computed).
H1 = 96
A, B = 4, 24


def row_bytes(h1=H1, a=A, b=B):
    """Bytes of one expert's rows over both tensors (float32)."""
    return 4 * (h1 + a * b)


def expert_table(seed, layers, num_logical, h1=H1, a=A, b=B):
    """base[l] = (T1 [num_logical, h1], T2 [num_logical, a, b]): the weights of logical expert e
    in layer l are T1[e], T2[e]. Distinct per expert and layer (random normal)."""
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(num_logical, h1, generator=g), torch.randn(num_logical, a, b, generator=g))
        for _ in range(layers)
    ]


EMPTY_FILL = -4242.0  # what an empty (-1) slot holds before the rearrangement


def rank_weights(base, phy2log, rank, local):
    """The weights rank `rank` holds under the map `phy2log` [layers, world*local]:
    [[T1 rows, T2 rows] per layer], slot s holding its logical expert's rows (EMPTY_FILL for -1)."""
    out = []
    for layer, (t1, t2) in enumerate(base):
        ids = phy2log[layer][rank * local:(rank + 1) * local]
        w1 = torch.full((local, t1.shape[1]), EMPTY_FILL)
        w2 = torch.full((local,) + tuple(t2.shape[1:]), EMPTY_FILL)
        for s, e in enumerate(ids):
            if e >= 0:
                w1[s] = t1[e]
                w2[s] = t2[e]
        out.append([w1, w2])
    return out


def check_rank_weights(got, base, phy2log, rank, local, what):
    """Every slot of `rank` whose new logical id is e >= 0 holds exactly expert e's rows; slots
    that become empty (-1) are not checked. Shapes and dtypes unchanged."""
    assert len(got) == len(base), f"{what}: rank {rank} has {len(got)} layers"
    for layer, (t1, t2) in enumerate(base):
        w1, w2 = got[layer]
        assert tuple(w1.shape) == (local, t1.shape[1]) and w1.dtype == torch.float32, (
            f"{what}: rank {rank} layer {layer}: first weight changed shape or dtype")
        assert tuple(w2.shape) == (local,) + tuple(t2.shape[1:]) and w2.dtype == torch.float32, (
            f"{what}: rank {rank} layer {layer}: second weight changed shape or dtype")
        ids = phy2log[layer][rank * local:(rank + 1) * local]
        for s, e in enumerate(ids):
            if e < 0:
                continue
            assert torch.equal(w1[s], t1[e]) and torch.equal(w2[s], t2[e]), (
                f"{what}: rank {rank} layer {layer} slot {s} does not hold expert {e}'s weights")


def random_map(rng, world, local, num_logical, p_empty=0.15):
    """One layer's physical-to-logical map: every logical expert once at a random slot, the
    other slots random replicas (or -1 with probability p_empty)."""
    n = world * local
    assert num_logical <= n
    slots = list(range(n))
    rng.shuffle(slots)
    m = [-1] * n
    for e in range(num_logical):
        m[slots[e]] = e
    for s in slots[num_logical:]:
        m[s] = -1 if rng.random() < p_empty else rng.randrange(num_logical)
    return m


def shuffle_within_ranks(rng, m, world, local):
    """The same experts per rank, in other slots (a pure intra-rank move)."""
    out = []
    for r in range(world):
        seg = m[r * local:(r + 1) * local]
        rng.shuffle(seg)
        out += seg
    return out


def needed_pairs(old, new, world, local):
    """(expert, dst rank) pairs that must cross the network for one layer: dst needs e in the
    new map and held no copy of e in the old map."""
    pairs = set()
    for r in range(world):
        have = set(old[r * local:(r + 1) * local])
        for e in new[r * local:(r + 1) * local]:
            if e >= 0 and e not in have:
                pairs.add((e, r))
    return pairs


def structured_layer(rng, world, local, per_peer):
    """A layer in which who sends what is forced: every moved expert has exactly one holder
    rank in the old map, and every rank must send (and receive) exactly per_peer experts to
    (from) each other rank, each of them to fill TWO slots of its destination.

    Old map: rank r holds local-1 distinct experts of its own (ids r*(local-1) + i) and a
    replica of one of them. New map on rank r: per_peer experts of each other rank q, each in
    two slots, then experts of its own (one of them twice when a slot is left over), shuffled.
    Bytes a rank must send per layer: (world-1) * per_peer rows."""
    own = local - 1
    incoming = 2 * (world - 1) * per_peer
    assert incoming < local
    old = []
    for r in range(world):
        ids = [r * own + i for i in range(own)]
        seg = ids + [rng.choice(ids)]
        rng.shuffle(seg)
        old += seg
    new = []
    for r in range(world):
        seg = []
        for q in range(world):
            if q != r:
                for e in rng.sample([q * own + i for i in range(own)], per_peer):
                    seg += [e, e]
        keep = local - incoming
        mine = rng.sample([r * own + i for i in range(own)], max(1, keep - 1))
        seg += (mine + mine)[:keep]
        rng.shuffle(seg)
        new += seg
    return old, new


# ---------------------------------------------------------------------------------------------
# rebalance_experts / preserve_intragpu_slots


def per_rank_counts(row, num_ranks):
    k = len(row) // num_ranks
    return [collections.Counter(row[g * k:(g + 1) * k]) for g in range(num_ranks)]


def max_preservable(old_row, new_row, num_ranks):
    """Slots that can keep their expert: per rank, sum over e of min(old count, new count)."""
    total = 0
    for co, cn in zip(per_rank_counts(old_row, num_ranks), per_rank_counts(new_row, num_ranks)):
        total += sum(min(c, cn.get(e, 0)) for e, c in co.items())
    return total


def lowest_old_slots_kept(old_row, new_row, post_row, num_ranks):
    """Per rank, an expert e that keeps k = min(old count, new count) of its old slots keeps
    the k lowest-numbered ones. Returns the first (rank, expert, slot) that breaks it, or None."""
    k_slots = len(old_row) // num_ranks
    for g, (co, cn) in enumerate(zip(per_rank_counts(old_row, num_ranks),
                                     per_rank_counts(new_row, num_ranks))):
        start = g * k_slots
        for e, c in co.items():
            keep = min(c, cn.get(e, 0))
            slots = [start + i for i in range(k_slots) if old_row[start + i] == e]
            for s in slots[:keep]:
                if post_row[s] != e:
                    return (g, e, s)
    return None


def kept_slots(old_row, post_row):
    return sum(1 for o, p in zip(old_row, post_row) if o == p)


def check_log2phy(phy2log, log2phy, logcnt, what):
    """log2phy[l, e, :logcnt[l, e]] are exactly the physical slots of e (any order), the rest -1;
    logcnt[l, e] is e's number of slots."""
    phy2log = np.asarray(phy2log)
    log2phy = np.asarray(log2phy)
    logcnt = np.asarray(logcnt)
    layers, num_logical = logcnt.shape
    for l in range(layers):
        for e in range(num_logical):
            slots = sorted(np.nonzero(phy2log[l] == e)[0].tolist())
            c = int(logcnt[l, e])
            assert c == len(slots), f"{what}: layer {l} expert {e}: logcnt {c}, {len(slots)} slots"
            row = log2phy[l, e].tolist()
            assert sorted(row[:c]) == slots and all(x == -1 for x in row[c:]), (
                f"{what}: layer {l} expert {e}: log2phy does not list its slots")


def replica_idx_from(phy2log):
    """Replica index of each slot: the k-th occurrence (from the left) of its expert gets k."""
    out = np.zeros_like(phy2log, dtype=np.int64)
    for l in range(phy2log.shape[0]):
        seen = collections.Counter()
        for i, e in enumerate(phy2log[l].tolist()):
            out[l, i] = seen[e]
            seen[e] += 1
    return out
