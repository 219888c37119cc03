"""Judge-side helpers: a MessageQueue writer with local readers (shared-memory ring, zmq IPC
on overflow) and remote readers (zmq TCP on loopback), all in the subject's process, and the
seeded messages the probes send. Nothing here imports the upstream package: it reaches the
subject only through the module proxies the probe files pass in."""
# INFRADEV-PROBE-CANARY-6b2e94d0a7c1

import numpy as np

MQ = "vllm.distributed.device_communicators.shm_broadcast"
MiB = 1 << 20
TIMEOUT = 30.0   # seconds a dequeue may wait (a lost message raises TimeoutError, not a hang)


def import_now(describe, *modules):
    """Imports the modules in the subject at collection (`describe` is subject.describe), so
    that no test's measure includes the import; the tests meet any error again and report it."""
    for m in modules:
        try:
            describe(m)
        except Exception:
            pass


class Queue:
    """One writer, `n_local` local readers and `n_remote` remote readers (connect_ip
    127.0.0.1: loopback only, which a sandbox without network has). Every party lives in the
    subject's process; the handshake (wait_until_ready) is sequential: the writer first (the
    readers' subscriptions are already queued by zmq), then each reader."""

    def __init__(self, mq, n_local, n_remote, max_chunk_bytes, max_chunks):
        self.writer = mq.MessageQueue(
            n_reader=n_local + n_remote, n_local_reader=n_local,
            max_chunk_bytes=max_chunk_bytes, max_chunks=max_chunks, connect_ip="127.0.0.1")
        handle = self.writer.export_handle()
        create = mq.MessageQueue.create_from_handle
        self.readers = [create(handle, rank) for rank in range(n_local + n_remote)]
        self.max_chunks = max_chunks
        self.writer.wait_until_ready()
        for r in self.readers:
            r.wait_until_ready()


def random_array(rng, nbytes, dtype):
    """A seeded array of about nbytes bytes (bit patterns, not only small integers)."""
    dt = np.dtype(dtype)
    n = max(1, nbytes // dt.itemsize)
    if dt == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8)
    a = raw.view(dt)
    if dt.kind == "f":
        a = np.where(np.isnan(a), 0, a).astype(dt)   # NaN != NaN would spoil equality
    return a


def make_message(rng, step, kind, large_hi):
    """A message of one kind; large arrays are 1 MiB .. large_hi bytes."""
    def big():
        return int(rng.integers(MiB, large_hi))
    if kind == "small":
        return {"step": step, "ids": rng.integers(0, 1 << 40, 37, dtype=np.int64),
                "temps": random_array(rng, 4096, "float32"), "name": f"req-{step}",
                "done": bool(rng.integers(2))}
    if kind == "large":
        return {"step": step, "hidden": random_array(rng, big(), "float32"),
                "mask": random_array(rng, 1000, "bool"), "tag": "large"}
    if kind == "bytes":
        return {"step": step, "blob": rng.bytes(big()), "small": rng.bytes(100),
                "arr": random_array(rng, 512 * 1024, "int16")}
    if kind == "nested":
        return {"step": step,
                "layers": [{"w": random_array(rng, big(), "float16"),
                            "b": random_array(rng, 3000, "float64")},
                           (step, random_array(rng, MiB, "uint8"))],
                "meta": {"shape": (3, 4), "arr": random_array(rng, 2 * MiB + 7, "int32")}}
    if kind == "many":
        return {"step": step, "parts": [random_array(rng, big(), "int64") for _ in range(3)]}
    raise ValueError(kind)


def flatten(obj, prefix=""):
    """(path, leaf) pairs of a message, for a precise mismatch report."""
    if isinstance(obj, dict):
        out = []
        for k, v in obj.items():
            out += flatten(v, f"{prefix}/{k}")
        return out
    if isinstance(obj, (list, tuple)):
        out = [(f"{prefix}#{type(obj).__name__}{len(obj)}", None)]
        for i, v in enumerate(obj):
            out += flatten(v, f"{prefix}[{i}]")
        return out
    return [(prefix, obj)]


def same(got, want):
    """Bit-identical: same structure, container types, dtypes, shapes and bytes."""
    if isinstance(want, np.ndarray):
        return (isinstance(got, np.ndarray) and got.dtype == want.dtype
                and got.shape == want.shape
                and np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes())
    if isinstance(want, dict):
        return (isinstance(got, dict) and list(got) == list(want)
                and all(same(got[k], want[k]) for k in want))
    if isinstance(want, (list, tuple)):
        return (type(got) is type(want) and len(got) == len(want)
                and all(same(g, w) for g, w in zip(got, want)))
    return type(got) is type(want) and got == want


def mismatch(got, want):
    """The first differing leaf path (for the assertion message)."""
    g, w = dict(flatten(got)), flatten(want)
    for path, leaf in w:
        if path not in g or not same(g[path], leaf):
            return path
    return "<structure>"
