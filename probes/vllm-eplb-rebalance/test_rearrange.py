"""Probes across expert-parallel ranks: rearrange_expert_weights_inplace in real gloo groups
(the default group as the EP group), each rank holding its own slice of the expert weights.
Expected states are computed in the judge from the maps and a table of weights keyed by
logical expert id."""
# INFRADEV-PROBE-CANARY-5e0b7c1f2a93

import random

import torch
from infradev_probe import subject, workload_seed

import _eplb as E

PROBE_SECRET = "PROBE-SECRET-eplb-rearrange-9d41"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

RX = "vllm.distributed.eplb.rebalance_execute"


def _init(group):
    """gloo default group on every rank; torch.cuda.synchronize() (called unconditionally by
    the upstream function) replaced by a harmless subject-side zero-argument callable, since
    the ranks have no GPU (prompt: "Testing on CPU")."""
    group.call_same("torch.distributed", "init_process_group", backend="gloo")
    for rank in group:
        cuda = rank.module("torch.cuda")
        cuda.synchronize = cuda.is_available


def _rearrange(group, handles, old, new, **kw):
    """rearrange_expert_weights_inplace on every rank at once, ep_group = the default group."""
    fns = [rank.module(RX).rearrange_expert_weights_inplace for rank in group]
    worlds = [rank.module("torch.distributed").group.WORLD for rank in group]
    o = torch.tensor(old, dtype=torch.int64)
    n = torch.tensor(new, dtype=torch.int64)
    out = group.call_each(fns, [(o, n, handles[r], worlds[r]) for r in range(len(group))],
                          [dict(kw) for _ in range(len(group))])
    assert out == [None] * len(group), "rearrange_expert_weights_inplace returns None"


def _put_weights(group, base, phy2log, local):
    return [rank.put(E.rank_weights(base, phy2log, r, local)) for r, rank in enumerate(group)]


def _check(group, handles, base, phy2log, local, what):
    for r, rank in enumerate(group):
        E.check_rank_weights(rank.fetch(handles[r]), base, phy2log, r, local, what)


def _state(world):
    rng = random.Random(SEED * 10 + world)
    local, layers = 6, 3
    num_logical = world * local - world  # `world` redundant slots: replicas and empty slots
    base = E.expert_table(SEED * 10 + world, layers, num_logical)
    m0 = [E.random_map(rng, world, local, num_logical) for _ in range(layers)]
    m1 = [E.random_map(rng, world, local, num_logical) for _ in range(layers)]
    m2 = [E.shuffle_within_ranks(rng, row, world, local) for row in m1]
    m3 = [E.random_map(rng, world, local, num_logical) for _ in range(layers)]
    m4 = [E.random_map(rng, world, local, num_logical, p_empty=0.4) for _ in range(layers)]
    with subject.ranks(world) as group:
        _init(group)
        handles = _put_weights(group, base, m0, local)
        _rearrange(group, handles, m0, m1)
        _check(group, handles, base, m1, local, "random old -> random new")
        _rearrange(group, handles, m1, m2)
        _check(group, handles, base, m2, local, "moves inside each rank only")
        _rearrange(group, handles, m2, m2)
        _check(group, handles, base, m2, local, "old == new")
        _rearrange(group, handles, m2, m3, is_profile=True)
        _check(group, handles, base, m2, local, "is_profile=True leaves the weights alone")
        _rearrange(group, handles, m2, m3)
        _rearrange(group, handles, m3, m4)
        _check(group, handles, base, m4, local, "two rearrangements in a row (many empty slots)")


def test_rearrange_state_2_ranks():
    """Requirement: on 2 gloo ranks (6 slots each, 3 MoE layers, 2 weight tensors per layer,
    one of them 3-D), after rearrange_expert_weights_inplace every slot whose new logical
    expert is e >= 0 holds exactly expert e's rows, for random maps with replicas and empty
    (-1) slots, moves inside one rank only, an unchanged map, is_profile=True (no weight
    changes) and two rearrangements in a row. Bit-exact: the rows are copied, never computed.

    The official execute test needs CUDA devices and NCCL (it is skipped on CPU); the official
    CPU tests never call rearrange_expert_weights_inplace."""
    _state(2)


def test_rearrange_state_4_ranks():
    """Requirement: as test_rearrange_state_2_ranks, on 4 gloo ranks (24 slots, 20 logical
    experts), where an expert needed by several ranks has replicas on several senders.

    The official execute test needs CUDA devices and NCCL (it is skipped on CPU)."""
    _state(4)


# Traffic workload, 4 ranks, 8 slots per rank, 4 MoE layers, 2 weight tensors whose rows make
# 16 KiB per expert. In each of ROUNDS rearrangements every moved expert has exactly one holder
# rank in the old map (replicas only inside that rank), and every rank must get PER_PEER
# experts from each other rank per layer, each of them into two of its slots, so each rank
# must send exactly ROUNDS * LAYERS * 3 * PER_PEER = 36 rows = 576 KiB whatever the
# implementation. Then QUIET rearrangements that need no traffic at all (unchanged maps,
# moves inside ranks). Sending per destination slot, twice, to every rank or all-gathering
# the weights at least doubles the bytes (see the calibration note in probes.toml).
ROUNDS, LAYERS, LOCAL, PER_PEER = 3, 4, 8, 1
H1_T, A_T, B_T = 3072, 4, 256
QUIET = 4


def test_rearrange_sends_each_expert_once():
    """Requirement: rearrange_expert_weights_inplace sends each (expert, destination rank)
    pair once, only to ranks that hold no copy of the expert, and nothing when no rank needs
    an expert it lacks: 3 rearrangements on 4 gloo ranks needing 576 KiB of rows per rank
    (every expert a rank needs goes into two of its slots), then 4 that need none
    (unchanged maps, moves inside ranks), stay within the traffic
    budget, and every slot ends with the right weights.

    The official tests never measure what the exchange sends: a patch that sends an expert
    to every rank, once per destination slot instead of once per rank, twice, or that
    all-gathers the weights, passes them."""
    rng = random.Random(SEED + 7)
    world = 4
    rb = E.row_bytes(H1_T, A_T, B_T)
    with subject.ranks(world) as group:
        _init(group)
        for i in range(ROUNDS):
            lay = [E.structured_layer(rng, world, LOCAL, PER_PEER) for _ in range(LAYERS)]
            old, new = [o for o, _ in lay], [n for _, n in lay]
            for l in range(LAYERS):
                sent = E.needed_pairs(old[l], new[l], world, LOCAL)
                assert len(sent) == world * (world - 1) * PER_PEER, "scenario"
            num_logical = world * (LOCAL - 1)
            base = E.expert_table(SEED + 100 + i, LAYERS, num_logical, H1_T, A_T, B_T)
            handles = _put_weights(group, base, old, LOCAL)
            _rearrange(group, handles, old, new)
            _check(group, handles, base, new, LOCAL, f"round {i}")
        num_logical = world * LOCAL - 4
        base = E.expert_table(SEED + 200, LAYERS, num_logical, H1_T, A_T, B_T)
        m = [E.random_map(rng, world, LOCAL, num_logical) for _ in range(LAYERS)]
        handles = _put_weights(group, base, m, LOCAL)
        for q in range(QUIET):
            nxt = m if q % 2 == 0 else [E.shuffle_within_ranks(rng, row, world, LOCAL) for row in m]
            _rearrange(group, handles, m, nxt)
            m = nxt
        _check(group, handles, base, m, LOCAL, "quiet rearrangements")
    assert rb == 16384
