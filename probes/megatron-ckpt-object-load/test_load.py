"""Probes on 4 gloo ranks: a torch_dist checkpoint with ShardedObjects replicated across ranks
(main and non-main replicas, int and tuple replica ids) and sharded/replicated tensors, saved
by the ranks and loaded back with FullyParallelLoadStrategyWrapper; every rank must get every
object and tensor it asked for, equal to what was saved (the judge's own values, _ckpt.py);
with per_rank_object_load=True the load must not exchange the objects between ranks
(traffic budget), and the default keeps the gather-based path."""
# INFRADEV-PROBE-CANARY-5b1f07c2e9a4

import pytest
from infradev_probe import subject, workload_seed

import _ckpt as C

PROBE_SECRET = "PROBE-SECRET-ckpt-object-load-3d71"
SEED = workload_seed(PROBE_SECRET)

# (layout, exchange_algo, object size in bytes, number of row-sharded tensors)
CASES = [
    ("tp2_dp2", "broadcast", 4096, 3),
    ("pp2_dp2", "broadcast", 1024, 2),
    ("ring", "broadcast", 2048, 1),
    ("tp2_dp2", "gather_object", 512, 2),
    ("ring", "gather_object", 1024, 0),
]


def _roundtrip(group, name, algo, size, n_tensors, tag, **kw):
    sds, expected = C.build(group, f"{SEED}/{tag}", name, algo, size, n_tensors, True)
    path = C.make_dir(group)
    C.save(group, sds, path)
    to_load, _ = C.build(group, f"{SEED}/{tag}", name, algo, size, n_tensors, False)
    loaded = C.load(group, C.wrappers(group, algo, **kw), to_load, path)
    C.check(loaded, expected, f"{name}/{algo}/{kw}")


def test_per_rank_object_load_gives_every_object():
    """Requirement: with per_rank_object_load=True, for 3 layouts of replicated objects (one
    main among 4 holders, mains on 2 of 4 ranks, tuple replica ids, a rank holding a main shard
    and a neighbour's non-main shard of one object) and exchange_algo 'broadcast' and
    'gather_object', every rank's load returns every object and tensor of its state dict,
    equal to what was saved."""
    with subject.ranks(C.WORLD) as group:
        C.prepare(group)
        for i, (name, algo, size, n) in enumerate(CASES):
            _roundtrip(group, name, algo, size, n, f"s{i}", per_rank_object_load=True)
        # The same wrapper loads twice (and a second checkpoint) without going wrong.
        sds, expected = C.build(group, f"{SEED}/twice", "ring", "broadcast", 256, 1, True)
        path = C.make_dir(group)
        C.save(group, sds, path)
        wraps = C.wrappers(group, "broadcast", per_rank_object_load=True)
        for k in range(2):
            to_load, _ = C.build(group, f"{SEED}/twice", "ring", "broadcast", 256, 1, False)
            C.check(C.load(group, wraps, to_load, path), expected, f"twice #{k}")


def test_default_load_unchanged():
    """Requirement: without per_rank_object_load (its default, False), the wrapper loads the
    same layouts as before: every rank gets every object and tensor equal to what was saved."""
    with subject.ranks(C.WORLD) as group:
        C.prepare(group)
        for i, (name, algo, size, n) in enumerate(CASES[:3]):
            _roundtrip(group, name, algo, size, n, f"d{i}")


# Traffic scenario: 3 objects of 256 KiB per rank (one replicated on all 4 ranks, one on 2,
# one per rank) beside 64 row-sharded tensors; the gather-based path would send every loaded
# object to every other rank (~2.4 MB per rank), the per-rank path sends only metadata.
TRAFFIC_OBJ = 256 * 1024
TRAFFIC_TENSORS = 64


def test_object_load_sends_no_objects():
    """Requirement: on 4 gloo ranks, saving and loading (per_rank_object_load=True, 'broadcast')
    a checkpoint with 256 KiB objects replicated across ranks and 64 sharded tensors stays
    within the traffic budget, every rank getting every object and tensor right: no object is
    exchanged between ranks."""
    with subject.ranks(C.WORLD) as group:
        C.prepare(group)
        _roundtrip(group, "tp2_dp2", "broadcast", TRAFFIC_OBJ, TRAFFIC_TENSORS, "traffic",
                   per_rank_object_load=True)
