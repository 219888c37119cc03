"""Single-process probes of HyperCommGrid's named layouts (views): rank enumerations of every
view against the judge's own computation, and what register_view accepts, rejects and leaves
behind. No process group is created here, so no torch.distributed initialisation is needed:
the grid takes the world size from WORLD_SIZE (unchanged behaviour, stated in the prompt)."""
# INFRADEV-PROBE-CANARY-7c3e91d04b25

import pytest
from infradev_probe import subject, workload_seed

import _layouts as L

PROBE_SECRET = "PROBE-SECRET-hypercomm-views-41d7"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

hcg = subject.module("megatron.core.hyper_comm_grid")


def _world(n=64):
    subject.module("os").environ["WORLD_SIZE"] = str(n)


def _enum(grid, dims, view=None):
    if view is None:
        return L.canonical(grid.get_rank_enum(dims))
    return L.canonical(grid.get_rank_enum(dims, view=view))


def test_view_enumerations_match_reference():
    """Requirement: for 40 random grids (4-24 ranks, rank_offset 0, 3 or 8) each with 1-3
    registered views (other factorizations of the same span; some dims shared with the base,
    at another position but with the same membership), get_rank_enum(dims, view=name) gives,
    for every non-empty subset of the view's dims (given as a list in any order, or a single
    name as a string), exactly the groups the view's own shape and dim names make over the
    grid's ranks; get_rank_enum(dims) and get_rank_enum(dims, view=None) keep giving the base
    layout's groups after views are registered.

    The official tests check one or two hand-picked enumerations of one view of 8 ranks, with
    no rank offset and the dims in one order."""
    _world()
    rng = L.rng_for(SEED, "enum")
    for (bshape, bnames, offset), views in L.random_layouts(rng, 40):
        grid = hcg.HyperCommGrid(list(bshape), list(bnames), rank_offset=offset)
        before = {tuple(d): _enum(grid, L.shuffled(rng, d)) for d in L.subsets(bnames)}
        for name, vshape, vnames, shared in views:
            grid.register_view(name, list(vshape), list(vnames), shared_dims=list(shared))
        for dims in L.subsets(bnames):
            want = L.groups(bshape, bnames, dims, offset)
            assert before[tuple(dims)] == want, f"base {bshape} {bnames} {dims} (before views)"
            assert _enum(grid, L.shuffled(rng, dims)) == want, f"base {bshape} {dims}"
            assert _enum(grid, L.shuffled(rng, dims), view=None) == want
        for name, vshape, vnames, shared in views:
            for dims in L.subsets(vnames):
                want = L.groups(vshape, vnames, dims, offset)
                got = _enum(grid, L.shuffled(rng, dims), view=name)
                assert got == want, (
                    f"view {name} {vshape} {vnames} (base {bshape}, offset {offset}) dims {dims}")
                if len(dims) == 1:
                    assert _enum(grid, dims[0], view=name) == want, f"view {name} '{dims[0]}'"


def _register_fails(grid, exc, *args, **kwargs):
    with pytest.raises(exc):
        grid.register_view(*args, **kwargs)


def test_register_view_rejects_bad_layouts_and_leaves_no_trace():
    """Requirement: register_view raises ValueError for a name already registered, a shape and
    dim_names of different lengths, duplicate dim names, a size that is not a positive int
    (0, -2, 2.0), a layout of another size than the grid, duplicate shared dims, a shared dim
    missing from the base or from the view, and a shared dim whose groups differ from the base's
    (with the same size at another stride, for each shared dim of a list); a rejected view is
    not registered (its name is then unknown: KeyError, and it can be registered correctly
    afterwards), and leaves the other views and the base as they were. Valid layouts are
    accepted: numpy integer sizes, a shared dim at another position than in the base with the
    same groups, several shared dims. An unknown view raises KeyError and a dim the view does
    not have raises ValueError in get_rank_enum, get_pg and create_pg; get_pg of a group not
    created raises KeyError; the caller's lists are copied (changing them afterwards changes
    nothing).

    The official tests check each error once on fresh grids; they never look at the grid after
    a rejected registration, never reuse the rejected name, and never try a shared dim that
    keeps its membership at another position."""
    _world()
    np = subject.module("numpy")
    grid = hcg.HyperCommGrid([2, 3, 2], ["tp", "dp", "pp"])  # pp stride 6, dp stride 2
    base_pp = L.groups([2, 3, 2], ["tp", "dp", "pp"], "pp")
    good = ("moe", [2, 3, 2], ["etp", "ep", "pp"])
    grid.register_view(*good, shared_dims=["pp"])
    bad = [
        ((ValueError,), ("moe", [12], ["x"]), {}),  # name taken
        ((ValueError,), ("v", [4, 3], ["a"]), {}),  # lengths differ
        ((ValueError,), ("v", [4, 3], ["a", "a"]), {}),  # duplicate dim names
        ((ValueError,), ("v", [12, 0], ["a", "b"]), {}),
        ((ValueError,), ("v", [-2, -6], ["a", "b"]), {}),
        ((ValueError,), ("v", [2.0, 6], ["a", "b"]), {}),  # not an int
        ((ValueError,), ("v", [2, 2, 2], ["a", "b", "c"]), {}),  # size 8 != 12
        ((ValueError,), ("v", [6, 2], ["a", "pp"]), {"shared_dims": ["pp", "pp"]}),
        ((ValueError,), ("v", [6, 2], ["a", "cp"]), {"shared_dims": ["cp"]}),  # not in base
        ((ValueError,), ("v", [6, 2], ["a", "b"]), {"shared_dims": ["pp"]}),  # not in view
        # pp of size 2 first: stride 1 instead of 6: other groups.
        ((ValueError,), ("v", [2, 6], ["pp", "a"]), {"shared_dims": ["pp"]}),
        # pp of size 2 at stride 2 (between two dims): other groups.
        ((ValueError,), ("v", [2, 2, 3], ["a", "pp", "b"]), {"shared_dims": ["pp"]}),
        # tp matches (stride 1, size 2), dp does not (size 3 at stride 4 instead of 2).
        ((ValueError,), ("v", [2, 2, 3], ["tp", "x", "dp"]), {"shared_dims": ["tp", "dp"]}),
    ]
    for excs, args, kwargs in bad:
        _register_fails(grid, excs, *args, **kwargs)
        if args[0] != "moe":
            with pytest.raises(KeyError):
                grid.get_rank_enum(args[2][0], view=args[0])
    # Nothing of the rejected views stayed: "v" is free, "moe" and the base unchanged.
    assert _enum(grid, ["etp", "ep"], view="moe") == L.groups(*good[1:], ["etp", "ep"])
    assert _enum(grid, "pp", view="moe") == base_pp
    assert _enum(grid, ["tp", "dp"]) == L.groups([2, 3, 2], ["tp", "dp", "pp"], ["tp", "dp"])
    # Valid: numpy sizes; pp shared at another position with the same stride 6 (2*3);
    # several shared dims.
    shape = [np.int64(2), np.int64(3), np.int64(2)]
    grid.register_view("v", shape, ["a", "b", "pp"], shared_dims=["pp"])
    assert _enum(grid, ["a", "pp"], view="v") == L.groups([2, 3, 2], ["a", "b", "pp"],
                                                         ["a", "pp"])
    grid.register_view("w", [6, 2], ["x", "pp"], shared_dims=["pp"])
    grid.register_view("z", [2, 3, 2], ["tp", "dp", "y"], shared_dims=["dp", "tp"])
    assert _enum(grid, ["y", "tp"], view="z") == L.groups([2, 3, 2], ["tp", "dp", "y"],
                                                         ["tp", "y"])
    # the caller's lists are copied
    vshape, vnames = [3, 4], ["c1", "c2"]
    grid.register_view("copied", vshape, vnames)
    vshape[0], vshape[1] = 4, 3
    vnames[0] = "zz"
    assert _enum(grid, "c1", view="copied") == L.groups([3, 4], ["c1", "c2"], "c1")
    # unknown views and dims
    for call in (grid.get_rank_enum, grid.get_pg):
        with pytest.raises(KeyError):
            call("pp", view="nope")
        with pytest.raises(ValueError):
            call("ep")  # a dim of view "moe" only, asked of the base
        with pytest.raises(ValueError):
            call(["tp", "ep"], view="moe")
    with pytest.raises(KeyError):
        grid.create_pg("a", view="nope")
    with pytest.raises(ValueError):
        grid.create_pg("ep", view="w")
    with pytest.raises(KeyError):
        grid.get_pg(["ep", "etp"], view="moe")
    with pytest.raises(KeyError):
        grid.get_pg("pp", view="moe")
