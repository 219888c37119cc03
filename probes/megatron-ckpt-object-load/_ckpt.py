"""Helpers of the megatron-ckpt-object-load probes: 4 gloo ranks save a torch_dist checkpoint
whose ShardedObjects are replicated across ranks (replica_id != 0 on some), then load it
back with FullyParallelLoadStrategyWrapper. Everything below runs in the judge: the ranks are
reached only through handles.

CPU set-up (done IN EACH RANK through handles, before any save or load): the torch_dist save
finalisation builds a tensor on torch.cuda.current_device() and the fully parallel load calls
torch.cuda.synchronize(); neither has a meaning without a GPU, so each rank's torch.cuda gets
current_device() -> "cpu" and synchronize() -> a no-op (subject-side callables: partials of
builtins). Tensor shards are exchanged with exchange_algo 'broadcast' only where no shard needs
exchanging (every tensor shard lives on one rank: its exchange is skipped), and with
'gather_object' (CPU all_gather_object) where tensors are replicated.

Each rank has its own /tmp (Docker executor): after the save, every file any rank wrote is
copied through the judge to the ranks that lack it, so each rank sees the whole checkpoint
(as on a shared file system). This goes through the broker's sockets, not the ranks' network."""

import random
import zlib

import torch

WORLD = 4
DC = "megatron.core.dist_checkpointing"
MAPPING = "megatron.core.dist_checkpointing.mapping"
FP = "megatron.core.dist_checkpointing.strategies.fully_parallel"
TS = "megatron.core.dist_checkpointing.strategies.torch"


def prepare(group):
    """init_process_group('gloo') on every rank, and the CPU stand-ins in torch.cuda."""
    for rank in group:
        functools = rank.module("functools")
        builtins = rank.module("builtins")
        cuda = rank.module("torch.cuda")
        cuda.current_device = functools.partial(builtins.str, "cpu")
        cuda.synchronize = functools.partial(builtins.len, "")
    group.call_same("torch.distributed", "init_process_group", backend="gloo")


def payload(seed, key, offset, size):
    """The value of the object `key` at `offset` (the same on every rank that holds it): an
    RNG-state-like uint8 tensor, an _extra_state-like bytes blob, and a tag."""
    rng = random.Random(zlib.crc32(f"{seed}/{key}/{offset}".encode()))
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    return {
        "state": torch.randint(0, 256, (size,), dtype=torch.uint8, generator=g),
        "extra_state": rng.randbytes(max(1, size // 4)),
        "tag": f"{key}@{list(offset)}",
    }


def tensor_value(seed, key, shape):
    g = torch.Generator().manual_seed(zlib.crc32(f"{seed}/{key}".encode()))
    return torch.randn(*shape, generator=g)


# A layout: for each rank, a list of objects (state-dict key, sharded key, global shape,
# global offset, replica id) and a tensor kind. Replica ids are ints or tuples (main: all 0).
def layout_objects(name, r):
    tp, dp = r % 2, r // 2
    if name == "tp2_dp2":
        return [
            ("rng", "rng_state", (1,), (0,), r),                      # main on rank 0 only
            ("extra", "decoder.extra_state", (2,), (tp,), dp),      # mains on ranks 0, 1
            ("own", "own", (WORLD,), (r,), 0),                       # every rank its own
        ]
    if name == "pp2_dp2":
        return [
            ("rng", "rng_state", (2,), (dp,), tp),                   # mains on ranks 0, 2
            ("sched", "sched", (1, 1), (0, 0), (0, tp, dp)),        # tuple replica ids
            ("extra", "layers.extra_state", (2, 1), (tp, 0), (dp, 0)),
        ]
    if name == "ring":
        # Each rank holds two shards of one object: its own (main) and its neighbour's
        # (a non-main replica), so every shard has one main and one non-main holder.
        return [
            ("mine", "ring", (WORLD,), (r,), 0),
            ("next", "ring", (WORLD,), ((r + 1) % WORLD,), 1),
            ("rng", "rng_state", (1,), (0,), (r, 0)),
        ]
    raise KeyError(name)


def build(group, seed, name, algo, obj_size, n_tensors, with_data):
    """Each rank's sharded state dict (a handle per rank) and the judge's expected loaded
    state dict per rank."""
    sds, expected = [], []
    for r, rank in enumerate(group):
        m = rank.module(MAPPING)
        items, want = {}, {}
        for key, skey, shape, offset, replica in layout_objects(name, r):
            value = payload(seed, skey, offset, obj_size)
            items[key] = m.ShardedObject(skey, value if with_data else None, tuple(shape),
                                         tuple(offset), replica_id=replica)
            want[key] = value
        for i in range(n_tensors):
            full = tensor_value(seed, f"w{i}", (WORLD, 8))
            data = full[r:r + 1].clone() if with_data else torch.zeros(1, 8)
            items[f"w{i}"] = m.ShardedTensor.from_rank_offsets(
                f"layer.{i}.weight", data, (0, r, WORLD), replica_id=0)
            want[f"w{i}"] = full[r:r + 1].clone()
        if algo == "gather_object":
            # Tensors replicated across ranks: these do need exchanging.
            bias = tensor_value(seed, "bias", (8,))
            items["bias"] = m.ShardedTensor.from_rank_offsets(
                "bias", bias.clone() if with_data else torch.zeros(8), replica_id=r)
            want["bias"] = bias
            tpw = tensor_value(seed, "tp_w", (2, 4))
            tp, dp = r % 2, r // 2
            items["tp_w"] = m.ShardedTensor.from_rank_offsets(
                "tp_w", tpw[tp:tp + 1].clone() if with_data else torch.zeros(1, 4),
                (0, tp, 2), replica_id=dp)
            want["tp_w"] = tpw[tp:tp + 1].clone()
        sds.append(rank.put(items))
        expected.append(want)
    return sds, expected


def make_dir(group):
    path = group[0].module("tempfile").mkdtemp(prefix="ckpt_")
    for rank in group:
        rank.module("os").makedirs(path, exist_ok=True)
    return path


def save(group, sds, path):
    fns = [rank.module(DC).save for rank in group]
    group.call_each(fns, [(sd, path) for sd in sds],
                    [{"validate_access_integrity": False} for _ in group])
    share_files(group, path)


def share_files(group, path):
    """Give every rank every file of the checkpoint (each rank's /tmp is its own)."""
    have = [set(rank.module("os").listdir(path)) for rank in group]
    for r, rank in enumerate(group):
        for fname in sorted(have[r]):
            missing = [q for q in range(len(group)) if fname not in have[q]]
            if not missing:
                continue
            data = rank.module("pathlib").Path(f"{path}/{fname}").read_bytes()
            for q in missing:
                group[q].module("pathlib").Path(f"{path}/{fname}").write_bytes(data)
                have[q].add(fname)


def wrappers(group, algo, **kw):
    out = []
    for rank in group:
        base = rank.module(TS).TorchDistLoadShardedStrategy()
        out.append(rank.module(FP).FullyParallelLoadStrategyWrapper(
            base, None, exchange_algo=algo, **kw))
    return out


def load(group, wraps, sds, path):
    return group.call_each([w.load for w in wraps], [(sd, path) for sd in sds])


def check(loaded, expected, what):
    for r, (got, want) in enumerate(zip(loaded, expected)):
        assert isinstance(got, dict), f"{what}: rank {r} got {type(got).__name__}"
        assert set(got) == set(want), (
            f"{what}: rank {r} loaded keys {sorted(got)}, expected {sorted(want)}")
        for key, value in want.items():
            g = got[key]
            if isinstance(value, torch.Tensor):
                assert isinstance(g, torch.Tensor) and torch.equal(g, value), (
                    f"{what}: rank {r} tensor {key} differs from the saved one")
            else:
                assert isinstance(g, dict) and set(g) == set(value), (
                    f"{what}: rank {r} object {key} is not the saved object")
                assert g["tag"] == value["tag"], (
                    f"{what}: rank {r} object {key} is {g['tag']!r}, expected {value['tag']!r}")
                assert bytes(g["extra_state"]) == value["extra_state"], (
                    f"{what}: rank {r} object {key}: extra_state differs")
                assert torch.equal(g["state"], value["state"]), (
                    f"{what}: rank {r} object {key}: state differs")
