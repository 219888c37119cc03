"""AsyncIntermediateTensors: the receive handles are waited, and the postprocess functions
run, once, when the tensors are first needed. Handles and postprocess functions are judge
callbacks, so the judge sees every call the subject makes, in order."""
# INFRADEV-PROBE-CANARY-7c2e91d4b0a6

import torch
from infradev_probe import subject, subject_op

GW = "vllm.v1.worker.gpu_worker"


class _Log:
    def __init__(self):
        self.calls = []

    def handle(self, name):
        ns = subject.module("types").SimpleNamespace

        def wait():
            self.calls.append(("wait", name))

        def is_completed():
            return False

        return ns(wait=wait, is_completed=is_completed)

    def post(self, name, fn=None):
        def run():
            self.calls.append(("post", name))
            if fn is not None:
                fn()
        return run


def test_lazy_wait_order_and_once():
    """Requirement: AsyncIntermediateTensors(tensors, comm_handles=[3 handles],
    comm_postprocess=[2 functions]) is an IntermediateTensors; constructing it, reading
    kv_connector_output and holding it call nothing; the first read of the tensors (through
    .tensors, it["key"], len(it) or it.items()) waits every handle once, in order, and then
    runs every postprocess function once, in order, and sees what the postprocess functions
    put in the dictionary; no later read (nor wait_for_comm()) waits or runs anything again.
    An explicit wait_for_comm() before any read does the same once; comm_handles and
    comm_postprocess default to None (nothing to wait for).

    The official test uses one handle and one postprocess function and reads only .tensors:
    the order (every wait before any postprocess), several handles, the other ways of reading
    the tensors, and an explicit wait_for_comm() are unchecked."""
    gw = subject.module(GW)
    seq = subject.module("vllm.sequence")
    x = torch.arange(6, dtype=torch.float32)
    full = torch.arange(12, dtype=torch.float32).reshape(3, 4)

    readers = [
        lambda it: it.tensors,
        lambda it: it["h"],
        lambda it: subject_op(it, "__len__"),  # len() evaluated in the subject
        lambda it: it.items(),
    ]
    for i, read in enumerate(readers):
        log = _Log()
        tensors = subject.put({"h": x})
        hs = [log.handle(n) for n in ("a", "b", "c")]

        def fill(tensors=tensors):
            tensors["h"] = full  # what a postprocess does: replace the slice by the gathered tensor

        it = gw.AsyncIntermediateTensors(tensors, comm_handles=hs,
                                         comm_postprocess=[log.post("p1", fill), log.post("p2")])
        assert subject.isinstance(it, seq.IntermediateTensors)
        assert it.kv_connector_output is None
        assert log.calls == [], f"reader {i}: called {log.calls} before the tensors were read"
        read(it)
        want = [("wait", "a"), ("wait", "b"), ("wait", "c"), ("post", "p1"), ("post", "p2")]
        assert log.calls == want, f"reader {i}: {log.calls}"
        assert torch.equal(it["h"], full), f"reader {i}: the postprocessed tensor is not seen"
        assert torch.equal(it.tensors["h"], full)
        it.wait_for_comm()
        assert subject_op(it, "__len__") == 1
        assert log.calls == want, f"reader {i}: waited or postprocessed again: {log.calls}"

    log = _Log()
    it = gw.AsyncIntermediateTensors({"h": x}, comm_handles=[log.handle("a")],
                                     comm_postprocess=[log.post("p")])
    it.wait_for_comm()
    assert log.calls == [("wait", "a"), ("post", "p")]
    assert torch.equal(it.tensors["h"], x)
    it.wait_for_comm()
    assert log.calls == [("wait", "a"), ("post", "p")]

    it = gw.AsyncIntermediateTensors({"h": x})
    assert torch.equal(it.tensors["h"], x)
    it = gw.AsyncIntermediateTensors({"h": x}, comm_handles=[], comm_postprocess=[])
    assert torch.equal(it["h"], x)
