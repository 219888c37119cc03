"""Probes on 4 gloo ranks: the process groups HyperCommGrid creates for the base layout and for
registered views, on every rank, against the judge's own computation (_layouts.py); that the
ranks agree on them (a sum all-reduced over each group must be the group's one-hot membership);
that a view's shared dims reuse the base's groups; and what creating them costs on the wire."""
# INFRADEV-PROBE-CANARY-7c3e91d04b25

import pytest
import torch
from infradev_probe import subject, workload_seed

import _layouts as L

PROBE_SECRET = "PROBE-SECRET-hypercomm-ranks-8a02"
SEED = workload_seed(PROBE_SECRET)

HCG = "megatron.core.hyper_comm_grid"
WORLD = 4


def _init(group):
    group.call_same("torch.distributed", "init_process_group", backend="gloo")


def _grids(group, shape, names, offset, views):
    """The same grid (and views) built on every rank; handles in rank order."""
    grids = group.call_same(HCG, "HyperCommGrid", list(shape), list(names), rank_offset=offset,
                            backend="gloo")
    for name, vshape, vnames, shared in views:
        out = group.call_each([g.register_view for g in grids],
                              [(name, list(vshape), list(vnames)) for _ in range(WORLD)],
                              [{"shared_dims": list(shared)} for _ in range(WORLD)])
        assert out == [None] * WORLD
    return grids


def _create(group, grids, dims, view):
    """create_pg(dims[, view=]) on every rank at once (it is collective): per-rank results."""
    kw = {} if view is None else {"view": view}
    return group.call_each([g.create_pg for g in grids], [(list(dims),)] * WORLD,
                           [dict(kw) for _ in range(WORLD)])


def _get(group, grids, dims, view):
    kw = {} if view is None else {"view": view}
    return group.call_each([g.get_pg for g in grids], [(list(dims),)] * WORLD,
                           [dict(kw) for _ in range(WORLD)])


def _same_objects(group, a, b):
    return [rank.module("operator").is_(x, y) for rank, x, y in zip(group, a, b)]


def _check_groups(group, pgs, shape, names, dims, offset, what):
    """Every rank's group is the reference group holding it (None outside the span), by its
    recorded ranks and by communication: each member all-reduces its one-hot row, and the sum
    must be the group's membership vector on every member."""
    members = []
    for r, (rank, pg) in enumerate(zip(group, pgs)):
        want = L.group_of(shape, names, dims, r, offset)
        if want is None:
            assert pg is None, f"{what}: rank {r} is outside the grid but got a group"
            members.append(None)
            continue
        assert pg is not None, f"{what}: rank {r} got no group"
        got = sorted(rank.module("torch.distributed").get_process_group_ranks(pg))
        assert got == want, f"{what}: rank {r} is in {got}, expected {want}"
        members.append(want)
    fns, args, outs = [], [], []
    for r, rank in enumerate(group):
        if members[r] is None:
            fns.append(rank.module("builtins").len)
            args.append(([],))
            outs.append(None)
            continue
        t = torch.zeros(WORLD, dtype=torch.int64)
        t[r] = 1
        h = rank.put(t)
        fns.append(rank.module("torch.distributed").all_reduce)
        args.append((h,))
        outs.append(h)
    group.call_each(fns, args, [{"group": pgs[r]} if members[r] else {} for r in range(WORLD)])
    for r, rank in enumerate(group):
        if members[r] is None:
            continue
        got = rank.fetch(outs[r]).tolist()
        want = [1 if q in members[r] else 0 for q in range(WORLD)]
        assert got == want, f"{what}: all-reduce over rank {r}'s group gave {got}, expected {want}"


# Layouts of 4 ranks: (base shape, base dim names, rank_offset, views). Shared dims keep the
# base's groups (some at another position in the view).
LAYOUTS = [
    ([2, 2], ["tp", "dp"], 0,
     [("expert", [4], ["ep"], []), ("swapped", [2, 2], ["edp", "etp"], [])]),
    ([1, 2, 2], ["tp", "dp", "pp"], 0,
     [("expert", [2, 1, 2], ["etp", "ep", "pp"], ["pp"]),
      ("wide", [2, 2, 1], ["x", "pp", "y"], ["pp"])]),
    ([2, 1, 2], ["tp", "cp", "pp"], 0,
     [("moe", [2, 2, 1], ["tp", "pp", "ep"], ["tp", "pp"])]),
    ([2], ["tp"], 2, [("tail", [1, 2], ["etp", "ep"], [])]),
]


def _run_layout(group, grids, rng, shape, names, offset, views, base_first):
    made = {}  # (view, frozenset(dims)) -> per-rank handles
    base_groups = [d for d in L.subsets(names)]
    if base_first:
        for dims in base_groups:
            pgs = _create(group, grids, L.shuffled(rng, dims), None)
            made[(None, frozenset(dims))] = pgs
            _check_groups(group, pgs, shape, names, dims, offset, f"base {shape} {dims}")
    for vname, vshape, vnames, shared in views:
        for dims in L.subsets(vnames):
            key = frozenset(dims)
            if all(d in shared for d in dims):
                if (None, key) in made:
                    # Already created on the base: the view gives back the very same groups,
                    # and creating it again through the view is refused like on the base.
                    pgs = _get(group, grids, L.shuffled(rng, dims), vname)
                    assert all(_same_objects(group, pgs, made[(None, key)])), (
                        f"view {vname}: shared dims {dims} are not the base's groups")
                    with pytest.raises(KeyError):
                        _create(group, grids, dims, vname)
                    continue
                # Created through the view first: it is the base's group from then on.
                pgs = _create(group, grids, L.shuffled(rng, dims), vname)
                made[(None, key)] = pgs
                _check_groups(group, pgs, shape, names, dims, offset,
                              f"view {vname} shared {dims}")
                base = _get(group, grids, L.shuffled(rng, dims), None)
                assert all(_same_objects(group, pgs, base)), (
                    f"view {vname}: shared dims {dims} created through the view are not the "
                    f"base's groups")
                with pytest.raises(KeyError):
                    _create(group, grids, dims, None)
                continue
            pgs = _create(group, grids, L.shuffled(rng, dims), vname)
            made[(vname, key)] = pgs
            _check_groups(group, pgs, vshape, vnames, dims, offset, f"view {vname} {dims}")
            again = _get(group, grids, L.shuffled(rng, dims), vname)
            assert all(_same_objects(group, pgs, again)), f"view {vname}: get_pg {dims}"
            with pytest.raises(KeyError):
                _create(group, grids, dims, vname)
    if not base_first:
        for dims in base_groups:
            if (None, frozenset(dims)) in made:
                continue
            pgs = _create(group, grids, L.shuffled(rng, dims), None)
            made[(None, frozenset(dims))] = pgs
            _check_groups(group, pgs, shape, names, dims, offset, f"base {shape} {dims}")
    return made


def test_groups_right_on_every_rank():
    """Requirement: on 4 gloo ranks, for 4 layouts (2x2 with a 4-rank and a transposed 2x2
    view; 1x2x2 with views sharing pp at the same and at another position; 2x1x2 with a view
    sharing two dims; a 2-rank grid at rank_offset 2 with a view), create_pg for every
    non-empty subset of every view's dims (dims listed in shuffled order) returns on each rank
    the group the view's own layout puts it in (None on ranks outside the grid), get_pg(dims,
    view=) returns that same object whatever the order of dims, creating it again raises
    KeyError, and a sum all-reduced over each rank's group is that group's membership on every
    member. Shared dims, whether created through the base or through a view first, are the
    base's group objects through both. Then destroy() on every rank: every get_pg raises
    KeyError, and all the groups can be created again and work.

    The official multi-rank tests need 8 CUDA devices and NCCL (they are skipped on CPU); the
    mock tests check the enumeration passed to a patched new_subgroups_by_enumeration, never a
    real group's members on each rank or that the ranks agree."""
    rng = L.rng_for(SEED, "groups")
    with subject.ranks(WORLD) as group:
        _init(group)
        for i, (shape, names, offset, views) in enumerate(LAYOUTS):
            grids = _grids(group, shape, names, offset, views)
            made = _run_layout(group, grids, rng, shape, names, offset, views, i % 2 == 0)
            assert group.call_each([g.destroy for g in grids]) == [None] * WORLD
            for (vname, key) in made:
                with pytest.raises(KeyError):
                    _get(group, grids, sorted(key), vname)
            # The same grids create everything again after destroy(), in the other order.
            _run_layout(group, grids, rng, shape, names, offset, views, i % 2 == 1)
            group.call_each([g.destroy for g in grids])


# Traffic workload: every group of two layouts created once, membership checked locally
# (get_process_group_ranks: no traffic). Grid A, 1x2x2 (tp, dp, pp) with three views: "expert"
# and "wide" share pp (at the same and at another position), "flat" spans all 4 ranks: the 7
# base groups, then 6 + 6 + 1 view-private ones; the shared pp is then asked of both views 10
# times each (get_pg: no group may be made). Grid B, 2x1x2 (tp, cp, pp) with "moe" sharing tp
# and pp: the shared groups are created through the view first (3), then its 4 private ones,
# then the base's remaining 4; the shared ones are asked of the base. Grid A: 7 base + 6 + 6 + 1
# view-private; grid B: 3 shared + 4 view-private + 4 base: 31 create_pg calls in all.
TRAFFIC_A = ([1, 2, 2], ["tp", "dp", "pp"],
             [("expert", [2, 1, 2], ["etp", "ep", "pp"], ["pp"]),
              ("wide", [2, 2, 1], ["x", "pp", "y"], ["pp"]),
              ("flat", [4], ["all"], [])])
TRAFFIC_B = ([2, 1, 2], ["tp", "cp", "pp"], [("moe", [2, 2, 1], ["tp", "pp", "ep"], ["tp", "pp"])])


def _members(group, pgs, shape, names, dims, what):
    for r, (rank, pg) in enumerate(zip(group, pgs)):
        want = L.group_of(shape, names, dims, r)
        got = sorted(rank.module("torch.distributed").get_process_group_ranks(pg))
        assert got == want, f"{what}: rank {r} is in {got}, expected {want}"


def test_each_group_created_once():
    """Requirement: on 4 gloo ranks, creating every group of two layouts once (31 create_pg
    calls: 11 base groups, 17 view-private groups of four views, 3 groups of shared dims
    created through a view), with the shared groups then asked of the views and of the base
    (get_pg, 23 times), stays within the traffic budget: every create_pg makes its groups once,
    and a shared dim asked of a view makes no group of its own. Every group's members are
    checked on every rank, and the shared ones are the base's objects.

    No official test measures what group creation costs; creating a group twice, or a view's
    shared-dim group anew beside the base's, passes them."""
    rng = L.rng_for(SEED, "traffic")
    with subject.ranks(WORLD) as group:
        _init(group)
        shape, names, views = TRAFFIC_A
        grids = _grids(group, shape, names, 0, views)
        base = {}
        for dims in L.subsets(names):
            pgs = _create(group, grids, L.shuffled(rng, dims), None)
            base[frozenset(dims)] = pgs
            _members(group, pgs, shape, names, dims, f"A base {dims}")
        for vname, vshape, vnames, shared in views:
            for dims in L.subsets(vnames):
                if all(d in shared for d in dims):
                    continue
                pgs = _create(group, grids, L.shuffled(rng, dims), vname)
                _members(group, pgs, vshape, vnames, dims, f"A view {vname} {dims}")
        for _ in range(10):
            for vname in ("expert", "wide"):
                pgs = _get(group, grids, ["pp"], vname)
                assert all(_same_objects(group, pgs, base[frozenset(["pp"])]))
        group.call_each([g.destroy for g in grids])

        shape, names, views = TRAFFIC_B
        (vname, vshape, vnames, shared), = views
        grids = _grids(group, shape, names, 0, views)
        done = set()
        for dims in (["pp", "tp"], ["tp"], ["pp"]):
            pgs = _create(group, grids, L.shuffled(rng, dims), vname)
            _members(group, pgs, shape, names, dims, f"B view {vname} shared {dims}")
            assert all(_same_objects(group, pgs, _get(group, grids, dims, None)))
            done.add(frozenset(dims))
        for dims in L.subsets(vnames):
            if frozenset(dims) not in done:
                pgs = _create(group, grids, L.shuffled(rng, dims), vname)
                _members(group, pgs, vshape, vnames, dims, f"B view {vname} {dims}")
        for dims in L.subsets(names):
            if frozenset(dims) not in done:
                pgs = _create(group, grids, L.shuffled(rng, dims), None)
                _members(group, pgs, shape, names, dims, f"B base {dims}")
        group.call_each([g.destroy for g in grids])
