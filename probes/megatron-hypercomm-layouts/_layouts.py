"""Judge-side reference for the HyperCommGrid probes: which ranks share a process group, from
the layout alone, and the layouts (factorizations of one rank span) the probes run.

Nothing here imports megatron. The convention (the prompt's, and the base grid's since before
the change): a layout is a shape and dim names over the ranks rank_offset .. rank_offset+size-1;
dim_names[0] varies fastest, so rank = rank_offset + sum_i coord_i * prod(shape[:i]). The group
of a set of dims D holding a rank is every rank of the span whose coordinates on the dims not in
D are the rank's own."""
# INFRADEV-PROBE-CANARY-7c3e91d04b25

import itertools
import random


def coords(shape, idx):
    out = []
    for s in shape:
        out.append(idx % s)
        idx //= s
    return out


def groups(shape, dim_names, dims, offset=0):
    """The partition of the span into the groups of `dims` (a name or a list of names): a sorted
    list of sorted rank lists."""
    dims = [dims] if isinstance(dims, str) else list(dims)
    assert all(d in dim_names for d in dims), (dims, dim_names)
    size = 1
    for s in shape:
        size *= s
    keep = [i for i, d in enumerate(dim_names) if d not in dims]
    by_key = {}
    for idx in range(size):
        c = coords(shape, idx)
        by_key.setdefault(tuple(c[i] for i in keep), []).append(offset + idx)
    return sorted(sorted(g) for g in by_key.values())


def group_of(shape, dim_names, dims, rank, offset=0):
    """The group of `dims` holding `rank`, or None when the rank is outside the span."""
    for g in groups(shape, dim_names, dims, offset):
        if rank in g:
            return g
    return None


def canonical(enum):
    """A rank enumeration as a sorted list of sorted lists of plain ints."""
    return sorted(sorted(int(r) for r in g) for g in enum)


def subsets(names):
    """Every non-empty subset of `names`, in a fixed order."""
    out = []
    for k in range(1, len(names) + 1):
        out.extend(list(c) for c in itertools.combinations(names, k))
    return out


def same_membership(base, view, dims):
    """Whether `dims` make the same groups in both layouts ((shape, dim_names) each)."""
    return groups(base[0], base[1], dims) == groups(view[0], view[1], dims)


# ---- layouts for random single-process checks ---------------------------------------------

_FACTORS = {4: [[4], [2, 2], [1, 4], [2, 1, 2]], 6: [[6], [2, 3], [3, 2], [1, 2, 3]],
            8: [[8], [2, 4], [4, 2], [2, 2, 2], [2, 1, 4]],
            12: [[12], [2, 6], [3, 4], [2, 3, 2], [2, 2, 3], [3, 2, 2]],
            16: [[16], [4, 4], [2, 8], [2, 2, 4], [2, 4, 2], [2, 2, 2, 2]],
            24: [[24], [2, 3, 4], [4, 3, 2], [2, 2, 3, 2], [3, 8], [2, 12]]}


def random_layouts(rng, n):
    """n random (base, views) cases. base: (shape, dim_names, offset). views: a list of
    (name, shape, dim_names, shared_dims), each shared dim making the same groups as in the base
    (the judge checks it: views are built so that some shared dims sit at another position than
    in the base, with the same membership)."""
    cases = []
    while len(cases) < n:
        size = rng.choice(sorted(_FACTORS))
        bshape = list(rng.choice(_FACTORS[size]))
        bnames = [f"b{i}" for i in range(len(bshape))]
        offset = rng.choice([0, 0, 3, 8])
        views = []
        for v in range(rng.randint(1, 3)):
            vshape = list(rng.choice(_FACTORS[size]))
            vnames = [f"v{v}_{i}" for i in range(len(vshape))]
            # Try to rename some view dims to base dims of the same membership: shared dims.
            shared = []
            for i in range(len(vshape)):
                for bd in bnames:
                    if bd in vnames or bd in shared:
                        continue
                    trial = vnames[:i] + [bd] + vnames[i + 1:]
                    if same_membership((bshape, bnames), (vshape, trial), [bd]) \
                            and rng.random() < 0.7:
                        vnames = trial
                        shared.append(bd)
                        break
            views.append((f"view{v}", vshape, vnames, shared))
        cases.append(((bshape, bnames, offset), views))
    return cases


def shuffled(rng, dims):
    d = list(dims)
    rng.shuffle(d)
    return d


def rng_for(seed, salt):
    return random.Random(f"{seed}-{salt}")
