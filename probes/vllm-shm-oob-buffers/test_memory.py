"""Memory probes for MessageQueue.enqueue: the writer sends a large numpy array without
materialising a whole serialized copy of it, on the shared-memory ring path, the overflow
path and the remote path. The broker measures the subject's peak memory around each test
([probe.budget] peak_memory_mb); the readers live in the subject's process too and check a
sample of the array they receive."""
# INFRADEV-PROBE-CANARY-d40c7e2b9f15

import random

from infradev_probe import subject, subject_op, workload_seed

import _mq as Q

mq = subject.module("vllm.distributed.device_communicators.shm_broadcast")
np_s = subject.module("numpy")
op_s = subject.module("operator")


Q.import_now(subject.describe, mq, np_s, op_s)

PROBE_SECRET = "PROBE-SECRET-shm-oob-memory-51c9e3"
MiB = Q.MiB


def _send_one_large(q, mib, secret, read=True):
    """Makes a float64 array of `mib` MiB in the subject (arange from a seeded offset: every
    element's value is known to the judge), enqueues {"step", "hidden", "note"} once, and
    (when `read`) has every reader dequeue it and return 32 seeded windows of 256 elements
    by value."""
    rng = random.Random(workload_seed(secret))
    n = mib * MiB // 8
    first = rng.randrange(1 << 20)
    arr = subject.keep(np_s.arange, first, first + n, dtype="float64")
    msg = subject.put({"step": 7, "hidden": arr, "note": "large"})
    q.writer.enqueue(msg)
    # The array stays alive (held by `arr`) until every reader has it, as a caller's
    # tensor would: a writer that also holds a whole serialized copy shows in the peak.
    for r, reader in enumerate(q.readers if read else []):
        got = subject.keep(reader.dequeue, timeout=Q.TIMEOUT)
        assert got["step"] == 7 and got["note"] == "large"
        hidden = subject.keep(op_s.getitem, got, "hidden")
        # len() of a handle is not forwarded (the judge decides on data only): asked there
        assert subject_op(hidden, "__len__") == n, f"reader {r}: the array's length changed"
        for _ in range(32):
            i = rng.randrange(n - 256)
            window = hidden[i:i + 256]
            assert [float(x) for x in window] == [float(first + j) for j in range(i, i + 256)], (
                f"reader {r}: elements {i}..{i + 256} of the array differ")
        del hidden, got
    del msg, arr


def test_ring_path_sends_without_full_copy():
    """Requirement: enqueueing a 32 MiB float64 array that fits a 33 MiB chunk of the ring
    (2 local readers, which do not read it in this test: how a local reader deserializes
    from the ring, by copy or not, is left open) copies it into shared memory without a
    whole serialized copy of it in the writer: peak memory stays near the array plus the
    shared-memory pages it fills (about 2 x 32 MiB), not 3 x. Delivery on the ring path is
    checked by the state probes.

    The official test sends small ints: a copy of a large message cannot show."""
    q = Q.Queue(mq, n_local=2, n_remote=0, max_chunk_bytes=33 * MiB, max_chunks=2)
    _send_one_large(q, 32, PROBE_SECRET + "-ring", read=False)


def test_overflow_path_sends_without_full_copy():
    """Requirement: enqueueing a 64 MiB float64 array over the overflow channel (chunks of
    1 MiB, 1 local reader in the same process, whose zmq receive buffer holds the message)
    sends the array's memory as it is: peak memory stays near the array plus the reader's
    received copy (about 2 x 64 MiB), not 3 x.

    The official test never overflows a chunk."""
    q = Q.Queue(mq, n_local=1, n_remote=0, max_chunk_bytes=1 * MiB, max_chunks=2)
    _send_one_large(q, 64, PROBE_SECRET + "-overflow")


def test_remote_path_sends_without_full_copy():
    """Requirement: enqueueing a 64 MiB float64 array to a remote reader (TCP on 127.0.0.1,
    the reader in the same process) sends the array's memory as it is: peak memory stays
    near the array plus the reader's received copy (about 2 x 64 MiB), not 3 x.

    The official test has no remote reader."""
    q = Q.Queue(mq, n_local=0, n_remote=1, max_chunk_bytes=1 * MiB, max_chunks=2)
    _send_one_large(q, 64, PROBE_SECRET + "-remote")
