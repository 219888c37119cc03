"""Structural probe: the ring buffer's documented constructor and methods, called with
keyword arguments."""
# INFRADEV-PROBE-CANARY-0a6d2f95c3e1

from infradev_probe import subject, subject_op

shm = subject.module("vllm.distributed.device_communicators.shm_object_storage")


def _import_now():
    try:
        subject.describe(shm)
    except Exception:
        pass  # the test meets the error again and reports it


_import_now()


def test_public_interface():
    """Requirement: SingleWriterShmRingBuffer(data_buffer_size, name=None, create=False);
    MD_SIZE is 8 (a 4-byte id and a 4-byte size); allocate_buf(size), access_buf(address)
    and free_buf(is_free_fn, nbytes=None) work with keyword arguments; handle() returns
    (data_buffer_size, name), and a reader opened by that name sees the writer's bytes.

    The official tests call everything positionally."""
    sig = subject.signature(shm.SingleWriterShmRingBuffer)
    params = sig.parameters
    assert list(params)[:3] == ["data_buffer_size", "name", "create"]
    assert params["name"].default is None and params["create"].default is False
    ring = shm.SingleWriterShmRingBuffer(data_buffer_size=1024, create=True)
    assert ring.MD_SIZE == 8
    size, name = ring.handle()
    assert size == 1024 and isinstance(name, str)
    reader = shm.SingleWriterShmRingBuffer(data_buffer_size=1024, name=name, create=False)
    address, mid = ring.allocate_buf(size=5)
    assert mid == 0
    with ring.access_buf(address=address) as (view, meta):
        view[0:5] = b"hello"
    with reader.access_buf(address=address) as (view, meta):
        assert tuple(meta) == (0, 5 + 8)
        assert view.tobytes() == b"hello"
    seen = []

    def is_free(mid, data_view):
        seen.append(mid)
        return True

    # free_buf returns an iterable living in the subject (a range): listed there
    assert subject_op(ring.free_buf(is_free_fn=is_free, nbytes=None), "__iter__") == [0]
    assert seen == [0]
