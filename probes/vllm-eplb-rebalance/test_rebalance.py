"""Probes of the policy: rebalance_experts with the old map keeps experts that stay on a rank in
their old slots (only reordering slots inside each rank), and preserve_intragpu_slots on
multi-layer maps. Every expected value is computed in the judge from the inputs and from the
same call without the old map."""
# INFRADEV-PROBE-CANARY-5e0b7c1f2a93

import random

import numpy as np
import torch
from infradev_probe import subject, workload_seed

import _eplb as E

PROBE_SECRET = "PROBE-SECRET-eplb-rebalance-3b70"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

default = subject.module("vllm.distributed.eplb.policy.default")


def _loads(rng, layers, n):
    """Per-layer expert loads: a few hot experts (10x) among uniform ones."""
    return torch.tensor([[rng.randint(1, 1000) * (10 if rng.random() < 0.15 else 1)
                          for _ in range(n)] for _ in range(layers)], dtype=torch.int64)


# (num_replicas, num_groups, num_nodes, num_ranks): hierarchical on one node, on two nodes,
# the global fallback (num_groups % num_nodes != 0), and 8 ranks of 4 slots.
CONFIGS = [(24, 4, 1, 4), (24, 4, 2, 4), (20, 3, 2, 4), (32, 8, 2, 8)]
LAYERS, LOGICAL = 4, 16


def test_rebalance_keeps_experts_in_their_slots():
    """Requirement: DefaultEplbPolicy.rebalance_experts(weight, num_replicas, num_groups,
    num_nodes, num_ranks, old_global_expert_indices=old) returns, per rank and layer, the same
    experts as the call without the old map (same logcnt), arranged so that the number of
    slots keeping their old expert is the largest possible (per rank: the sum over experts of
    min(old count, new count) on that rank; an expert keeps its lowest-numbered old slots),
    and a log2phy that lists exactly each expert's slots. 4 configurations (hierarchical on
    1 and 2 nodes, global fallback, 8 ranks), 3
    successive rebalances each (perturbed and fresh loads), 4 layers.

    The official test calls preserve_intragpu_slots directly on three one-layer maps; it
    never calls rebalance_experts with old_global_expert_indices, never checks log2phy or
    logcnt after the reordering, and never uses more than one layer."""
    rng = random.Random(SEED)
    P = default.DefaultEplbPolicy
    discriminating = 0
    for (replicas, groups, nodes, ranks) in CONFIGS:
        w0 = _loads(rng, LAYERS, LOGICAL)
        old, _, _ = P.rebalance_experts(w0, replicas, groups, nodes, ranks)
        for trial in range(3):
            if trial < 2:
                scale = torch.tensor([[rng.uniform(0.7, 1.3) for _ in range(LOGICAL)]
                                      for _ in range(LAYERS)])
                w1 = (w0.double() * scale).round().to(torch.int64)
            else:
                w1 = _loads(rng, LAYERS, LOGICAL)
            free_p, _, free_cnt = P.rebalance_experts(w1, replicas, groups, nodes, ranks)
            p, l2p, cnt = P.rebalance_experts(w1, replicas, groups, nodes, ranks,
                                              old_global_expert_indices=old)
            what = f"config {(replicas, groups, nodes, ranks)}, rebalance {trial}"
            assert tuple(p.shape) == (LAYERS, replicas), f"{what}: phy2log shape"
            assert torch.equal(cnt, free_cnt), f"{what}: logcnt differs from the call without old"
            E.check_log2phy(p.numpy(), l2p.numpy(), cnt.numpy(), what)
            for l in range(LAYERS):
                o, f, q = old[l].tolist(), free_p[l].tolist(), p[l].tolist()
                assert E.per_rank_counts(q, ranks) == E.per_rank_counts(f, ranks), (
                    f"{what}, layer {l}: the experts of some rank differ from the call without old")
                best = E.max_preservable(o, f, ranks)
                kept = E.kept_slots(o, q)
                assert kept == best, (
                    f"{what}, layer {l}: {kept} slots keep their expert, {best} could")
                bad = E.lowest_old_slots_kept(o, f, q, ranks)
                assert bad is None, f"{what}, layer {l}: (rank, expert, slot) {bad} not kept"
                if E.kept_slots(o, f) < best:
                    discriminating += 1
            old = p  # the next rebalance starts from the map just produced
    assert discriminating > 0, "scenario: the call without old keeps every slot anyway"


def _random_phy2log(rng, layers, n, num_logical):
    return np.stack([
        np.concatenate([rng.permutation(num_logical),
                        rng.integers(0, num_logical, n - num_logical)])[rng.permutation(n)]
        for _ in range(layers)]).astype(np.int64)


def test_preserve_intragpu_slots_multi_layer():
    """Requirement: DefaultEplbPolicy.preserve_intragpu_slots(phy2log, phy_replicas_idx,
    num_ranks, old_phy2log) on int64 numpy arrays of 3-6 layers (2-4 ranks, 4-8 slots, with
    replicas; half the layers a shuffle of the new map inside each rank plus one swap across
    ranks) returns two arrays of the input shapes in which every rank keeps exactly its
    (expert, replica index) pairs of each layer, the largest possible number of slots keep
    their old expert (an expert's lowest-numbered old slots first), and the inputs are left
    unmodified; when the slots do not divide evenly among num_ranks, the mapping comes back
    unchanged.

    The official test has three hand-written one-layer cases and checks one old slot per
    expert; a per-layer mix-up in a vectorised implementation, an in-place update of the
    inputs, a second occurrence of a duplicated expert left out of its old slot, or an expert
    keeping its last old slot instead of its first passes it."""
    rng = np.random.default_rng(SEED)
    P = default.DefaultEplbPolicy
    for (ranks, slots, num_logical, layers) in [(2, 5, 7, 3), (4, 4, 10, 5), (3, 6, 9, 4),
                                                (4, 8, 8, 6)]:
        n = ranks * slots
        new = _random_phy2log(rng, layers, n, num_logical)
        old = _random_phy2log(rng, layers, n, num_logical)
        for l in range(0, layers, 2):
            row = new[l].copy()
            for g in range(ranks):
                rng.shuffle(row[g * slots:(g + 1) * slots])
            i, j = rng.integers(0, n, 2)
            row[i], row[j] = row[j], row[i]
            old[l] = row
        ridx = E.replica_idx_from(new)
        h_new, h_ridx, h_old = subject.put(new), subject.put(ridx), subject.put(old)
        post, post_r = P.preserve_intragpu_slots(h_new, h_ridx, ranks, h_old)
        post, post_r = np.asarray(post), np.asarray(post_r)
        what = f"{ranks} ranks x {slots} slots, {layers} layers"
        assert (np.array_equal(subject.fetch(h_new), new)
                and np.array_equal(subject.fetch(h_ridx), ridx)
                and np.array_equal(subject.fetch(h_old), old)), f"{what}: the inputs were modified"
        assert post.shape == new.shape and post_r.shape == ridx.shape, f"{what}: shapes"
        for l in range(layers):
            for g in range(ranks):
                sl = slice(g * slots, (g + 1) * slots)
                assert (sorted(zip(post[l, sl].tolist(), post_r[l, sl].tolist()))
                        == sorted(zip(new[l, sl].tolist(), ridx[l, sl].tolist()))), (
                    f"{what}, layer {l}, rank {g}: the (expert, replica) pairs changed")
            best = E.max_preservable(old[l].tolist(), new[l].tolist(), ranks)
            kept = E.kept_slots(old[l].tolist(), post[l].tolist())
            assert kept == best, f"{what}, layer {l}: {kept} slots keep their expert, {best} could"
            bad = E.lowest_old_slots_kept(old[l].tolist(), new[l].tolist(), post[l].tolist(), ranks)
            assert bad is None, f"{what}, layer {l}: (rank, expert, slot) {bad} not kept"
    new = np.array([[0, 1, 2, 3, 4, 0, 1]], dtype=np.int64)
    post, post_r = P.preserve_intragpu_slots(new, E.replica_idx_from(new), 2, new[:, ::-1].copy())
    assert np.array_equal(np.asarray(post), new), "7 slots on 2 ranks: mapping must be unchanged"
    assert np.array_equal(np.asarray(post_r), E.replica_idx_from(new)), (
        "7 slots on 2 ranks: replica indices must be unchanged")
