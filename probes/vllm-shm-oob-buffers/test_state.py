"""State probes for MessageQueue (shm_broadcast): seeded messages with small and large numpy
arrays (C and Fortran order), bytes and nested containers reach every reader bit-identical
and in order, on the shared-memory ring path, on the overflow path and across both, for two
local readers and one remote reader (zmq TCP on 127.0.0.1), all in the subject's process."""
# INFRADEV-PROBE-CANARY-2f8d61c4e09a

import numpy as np
from infradev_probe import subject, workload_seed

import _mq as Q

mq = subject.module("vllm.distributed.device_communicators.shm_broadcast")
np_s = subject.module("numpy")
op_s = subject.module("operator")


Q.import_now(subject.describe, mq, np_s, op_s)

PROBE_SECRET = "PROBE-SECRET-shm-oob-state-8a31f7"
MiB = Q.MiB


def _send_rounds(q, messages, fortran_every=3):
    """Sends the messages max_chunks at a time; after each round every reader (the local
    ones, then the remote one) dequeues the round and each message is compared, as it comes
    back by value, with the judge's copy. Every `fortran_every`-th message also carries a
    Fortran-order array made in the subject."""
    k = q.max_chunks
    for start in range(0, len(messages), k):
        round_ = messages[start:start + k]
        expected = []
        for i, msg in enumerate(round_):
            h = subject.put(msg)
            want = msg
            arrays = [v for v in msg.values() if isinstance(v, np.ndarray) and v.size >= 4]
            if (start + i) % fortran_every == 0 and arrays:
                # The message's largest array as a (n/4, 4) Fortran-order array made in the
                # subject (out of band when it is >= 1 MiB).
                flat = max(arrays, key=lambda v: v.nbytes)
                flat = flat[: flat.size // 4 * 4].reshape(-1, 4)
                fh = subject.keep(np_s.asfortranarray, flat)
                h = subject.put({**msg, "fortran": fh})
                want = {**msg, "fortran": np.asfortranarray(flat)}
            q.writer.enqueue(h)
            expected.append(want)
        for r, reader in enumerate(q.readers):
            for want in expected:
                got = reader.dequeue(timeout=Q.TIMEOUT)
                assert Q.same(got, want), (
                    f"reader {r} (local readers first, then remote): message step {want['step']} "
                    f"arrived different at {Q.mismatch(got, want)} (or out of order)")


def test_ring_path_messages_every_reader():
    """Requirement: with max_chunk_bytes 8 MiB, messages whose pickled size with their
    buffers fits a chunk (small arrays, 1-2.5 MiB arrays, bytes, nested dicts/lists/tuples,
    three large arrays in one message, Fortran-order arrays) travel the shared-memory ring,
    and a message of three 3 MiB arrays (9 MiB in all, each buffer alone far below the
    chunk) is still delivered (it does not fit a chunk); each arrives bit-identical and in
    order at 2 local readers and 1 remote reader.

    The official test broadcasts small ints only, never arrays or anything near a chunk."""
    rng = np.random.default_rng(workload_seed(PROBE_SECRET))
    q = Q.Queue(mq, n_local=2, n_remote=1, max_chunk_bytes=8 * MiB, max_chunks=4)
    kinds = ["small", "large", "nested", "bytes", "many", "small", "large", "nested",
             "bytes", "many", "large", "small"]
    msgs = [Q.make_message(rng, i, kind, int(2.5 * MiB)) for i, kind in enumerate(kinds)]
    over = {"step": len(msgs),
            "parts": [Q.random_array(rng, 3 * MiB, "int64") for _ in range(3)]}
    msgs.insert(6, over)
    for i, m in enumerate(msgs):
        m["step"] = i
    _send_rounds(q, msgs)


def test_overflow_path_messages_every_reader():
    """Requirement: with max_chunk_bytes 1 MiB, messages with 1-6 MiB arrays, bytes and
    nested containers (which do not fit a chunk) go to the readers over the overflow channel,
    interleaved with small messages that fit the ring; each arrives bit-identical and in
    order at 2 local readers and 1 remote reader.

    The official test's messages are a few bytes; it never overflows a chunk."""
    rng = np.random.default_rng(workload_seed(PROBE_SECRET + "-overflow"))
    q = Q.Queue(mq, n_local=2, n_remote=1, max_chunk_bytes=1 * MiB, max_chunks=4)
    kinds = ["large", "small", "bytes", "nested", "small", "many", "small", "large",
             "nested", "small", "bytes", "large"]
    msgs = [Q.make_message(rng, i, kind, 6 * MiB) for i, kind in enumerate(kinds)]
    _send_rounds(q, msgs)


def test_remote_only_reader():
    """Requirement: a queue with no local reader and one remote reader (n_local_reader 0,
    connect_ip 127.0.0.1) delivers small, large and nested messages bit-identical and in
    order.

    The official test always has local readers on one node."""
    rng = np.random.default_rng(workload_seed(PROBE_SECRET + "-remote"))
    q = Q.Queue(mq, n_local=0, n_remote=1, max_chunk_bytes=1 * MiB, max_chunks=4)
    kinds = ["small", "large", "nested", "bytes", "many", "small"]
    msgs = [Q.make_message(rng, i, kind, 4 * MiB) for i, kind in enumerate(kinds)]
    _send_rounds(q, msgs)


def test_default_max_chunk_bytes():
    """Requirement: MessageQueue's max_chunk_bytes defaults to 24 MiB (24 * 1024 * 1024),
    and its parameters keep their names (n_reader, n_local_reader, local_reader_ranks,
    max_chunk_bytes, max_chunks, connect_ip).

    The official test passes max_chunk_bytes explicitly."""
    params = subject.signature(mq.MessageQueue).parameters
    for name in ("n_reader", "n_local_reader", "local_reader_ranks", "max_chunk_bytes",
                 "max_chunks", "connect_ip"):
        assert name in params, name
    assert params["max_chunk_bytes"].default == 24 * 1024 * 1024
    assert params["max_chunks"].default == 10


def test_every_size_around_the_chunk_limit():
    """Requirement: whatever its size, a message is delivered intact: it fits a chunk with
    its framing or it overflows, never in between. With max_chunk_bytes 4096, messages of
    {"step", "payload": bytes} with every payload length from 3700 to 4111 bytes (so one of
    them fills a chunk exactly, whatever the framing), and with max_chunk_bytes = 1 MiB + 1024
    messages of a 1 MiB array (out of band) plus a payload of every length from 0 to 1299
    bytes, each reach a local reader bit-identical, in order.

    The official test sends a few bytes per message, and the other probes' messages are
    either far below a chunk or far above it."""
    rng = np.random.default_rng(workload_seed(PROBE_SECRET + "-edge"))
    q = Q.Queue(mq, n_local=1, n_remote=0, max_chunk_bytes=4096, max_chunks=4)
    reader = q.readers[0]
    for n in range(3700, 4112):
        payload = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        q.writer.enqueue({"step": n, "payload": payload})
        got = reader.dequeue(timeout=Q.TIMEOUT)
        assert got == {"step": n, "payload": payload}, (
            f"max_chunk_bytes 4096: the message with a {n}-byte payload arrived different")

    q = Q.Queue(mq, n_local=1, n_remote=0, max_chunk_bytes=MiB + 1024, max_chunks=4)
    reader = q.readers[0]
    first = int(rng.integers(1 << 20))
    arr = subject.keep(np_s.arange, first, first + MiB // 8, dtype="int64")
    for n in range(0, 1300):
        payload = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        q.writer.enqueue(subject.put({"step": n, "array": arr, "payload": payload}))
        got = subject.keep(reader.dequeue, timeout=Q.TIMEOUT)
        assert got["step"] == n and got["payload"] == payload, (
            f"max_chunk_bytes 1 MiB + 1 KiB: the message with a {n}-byte payload arrived "
            "different")
        assert bool(np_s.array_equal(subject.keep(op_s.getitem, got, "array"), arr)), (
            f"max_chunk_bytes 1 MiB + 1 KiB: the 1 MiB array of message {n} arrived different")
        del got
