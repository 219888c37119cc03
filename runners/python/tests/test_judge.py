"""The judge library (runners/python/infradev_probe) against a socketpair: the test plays the
broker's side with hand-written frames (the real broker is tested in the Rust suite)."""

import gc
import inspect
import socket
import threading

import pytest

from conftest import wire

import infradev_probe
from infradev_probe import (
    NotEncodable,
    StaleHandle,
    SubjectCrashed,
    SubjectError,
    SubjectTimeout,
    subject,
)
from infradev_probe import _core

MOD = {"kind": "module", "callable": False, "exception": False, "builtin": None}
CLS = {"kind": "class", "callable": True, "exception": False, "builtin": None}
OBJ = {"kind": "object", "callable": False, "exception": False, "builtin": None}
METHOD = {"kind": "method", "callable": True, "exception": False, "builtin": None}
FUNC = {"kind": "function", "callable": True, "exception": False, "builtin": None}


def exc_cls(builtin):
    return {"kind": "class", "callable": True, "exception": True, "builtin": builtin}


def ref(n, desc):
    return {"$ref": n, "describe": desc}


class Peer:
    """The broker's end: read what the judge sends, answer by hand."""

    def __init__(self, sock):
        self.sock = sock
        self.reader = wire.FrameReader(sock)
        self.seen = []

    def read(self):
        msg = self.reader.read()
        self.seen.append(msg)
        return msg

    def send(self, obj):
        self.sock.sendall(wire.pack(obj))

    def call(self, op=None):
        msg = self.read()
        assert msg is not None and msg["op"] == "call", msg
        if op is not None:
            assert msg["req"]["op"] == op, msg
        return msg["id"], msg["req"]

    def ok(self, value, op=None):
        n, req = self.call(op)
        self.send({"id": n, "ok": value, "subject_ns": 1000})
        return req

    def err(self, err, op=None):
        n, req = self.call(op)
        self.send({"id": n, "err": err})
        return req


@pytest.fixture
def broker():
    """Runs ``script(peer)`` in a thread as the broker of a fresh judge connection."""
    started = []

    def run(script, generation=1):
        a, b = socket.socketpair()
        a.settimeout(20)
        b.settimeout(20)
        peer = Peer(b)
        errors = []

        def main():
            try:
                hello = peer.read()
                assert hello == {"op": "hello"}
                peer.send({"op": "welcome", "generation": generation})
                script(peer)
            except BaseException as e:  # reported by the test
                errors.append(e)

        t = threading.Thread(target=main, daemon=True)
        t.start()
        client = _core.Client(a)
        client.hello()
        old = _core.set_client(client)
        started.append((t, errors, old, a, b, client))
        subject._modules.clear()
        return peer

    yield run
    for t, errors, old, a, b, client in started:
        t.join(timeout=20)
        _core.set_client(old)
        a.close()
        b.close()
        subject._modules.clear()
        if errors:
            raise errors[0]


def import_and_getattr(peer, name, value, module_ref=1):
    req = peer.ok(ref(module_ref, MOD), "import")
    assert req == {"op": "import", "module": "pkg"}
    req = peer.ok(value, "getattr")
    assert req == {"op": "getattr", "obj": {"$ref": module_ref}, "name": name}


def test_module_proxy_handles_and_values(broker):
    def script(p):
        import_and_getattr(p, "Thing", ref(2, CLS))
        req = p.ok(ref(3, OBJ), "call")
        assert req == {"op": "call", "obj": {"$ref": 2}, "args": [4],
                       "kwargs": {"$dict": [["size", 16]]}}
        assert p.ok([1, 2, {"$tuple": [3]}], "getattr")["name"] == "table"
        p.ok(ref(2, CLS), "getattr")  # the same class again: the same proxy

    broker(script)
    pkg = subject.module("pkg")
    assert subject.module("pkg") is pkg
    Thing = pkg.Thing
    t = Thing(4, size=16)
    assert isinstance(t, infradev_probe.Handle)
    assert t.table == [1, 2, (3,)]
    assert pkg.Thing is Thing
    assert repr(t) == "<subject object #3>"  # local: no subject text


def test_a_method_is_one_round_trip_after_the_first(broker):
    def script(p):
        import_and_getattr(p, "obj", ref(2, OBJ))
        assert p.ok(ref(3, METHOD), "getattr")["name"] == "step"
        for i in range(3):
            req = p.ok(i, "call_method")
            assert req == {"op": "call_method", "obj": {"$ref": 2}, "name": "step",
                           "args": [i, [1, 2]], "kwargs": {"$dict": []}}

    peer = broker(script)
    obj = subject.module("pkg").obj
    assert [obj.step(i, [1, 2]) for i in range(3)] == [0, 1, 2]
    ops = [m["req"]["op"] for m in peer.seen if m and m.get("op") == "call"]
    assert ops == ["import", "getattr", "getattr", "call_method", "call_method", "call_method"]


def test_remote_exceptions_become_local_stand_ins(broker):
    def script(p):
        import_and_getattr(p, "NoFreeBlocksError", ref(2, exc_cls("RuntimeError")))
        p.ok(ref(3, OBJ), "getattr")
        p.ok(ref(4, METHOD), "getattr")
        p.err({"builtin": "RuntimeError", "classes": [2]}, "call_method")
        p.err({"builtin": "KeyError", "classes": []}, "call_method")
        p.err({"builtin": None, "classes": []}, "call_method")
        p.err({"builtin": "AttributeError", "classes": []}, "getattr")
        p.err({"builtin": "infradev.StaleHandle", "classes": []}, "call_method")

    broker(script)
    pkg = subject.module("pkg")
    Err = pkg.NoFreeBlocksError
    assert isinstance(Err, type) and issubclass(Err, RuntimeError) and Err.__name__ == "NoFreeBlocksError"
    obj = pkg.obj
    with pytest.raises(Err) as info:
        obj.alloc(1)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, SubjectError)
    assert info.value.builtin == "RuntimeError"
    assert str(info.value) == "the subject raised NoFreeBlocksError (RuntimeError) in alloc"
    with pytest.raises(KeyError):
        obj.alloc(2)
    with pytest.raises(SubjectError) as info:
        obj.alloc(3)
    assert not isinstance(info.value, (KeyError, RuntimeError))
    assert not hasattr(obj, "missing")  # AttributeError from the subject
    with pytest.raises(StaleHandle):
        obj.alloc(4)


def test_protocol_errors_in_replies(broker):
    def script(p):
        p.ok({"$ref": 1, "describe": {"kind": "gadget"}}, "import")
        p.ok(ref(1, MOD), "import")
        p.err({"builtin": "SecretClassName", "classes": []}, "getattr")
        p.ok({"$nope": 1}, "getattr")

    broker(script)
    with pytest.raises(wire.ProtocolError):
        subject.module("pkg").x
    pkg = subject.module("pkg")
    with pytest.raises(wire.ProtocolError):
        pkg.x
    with pytest.raises(wire.ProtocolError):
        pkg.y


def test_faults_restart_generations(broker):
    def script(p):
        import_and_getattr(p, "obj", ref(2, OBJ))
        n, _ = p.call("call")
        p.send({"id": n, "fault": "crashed", "generation": 2})
        # the module proxy imports again in the new subject; the old handle is stale
        assert p.ok(ref(1, MOD), "import") == {"op": "import", "module": "pkg"}
        assert p.ok(7, "getattr")["name"] == "value"
        n, _ = p.call("getattr")
        p.send({"id": n, "fault": "timeout", "generation": 3})

    broker(script)
    pkg = subject.module("pkg")
    obj = pkg.obj
    with pytest.raises(SubjectCrashed):
        obj()
    assert not isinstance(SubjectCrashed("x"), Exception)  # a probe's except cannot eat it
    with pytest.raises(StaleHandle):
        obj()
    assert pkg.value == 7
    with pytest.raises(SubjectTimeout):
        pkg.gone
    assert subject.generation == 3


def test_callbacks(broker):
    def script(p):
        h = ref(5, OBJ)
        req = p.ok(h, "put")
        assert req["value"] == [3, 1, 2]
        p.ok(ref(7, METHOD), "getattr")
        n, req = p.call("call_method")
        assert req["kwargs"] == {"$dict": [["key", {"$callback": 1}]]}
        p.send({"id": n, "callback": {"cb": 1, "args": [3], "kwargs": {"$dict": []}}})
        assert p.read() == {"id": n, "callback_ok": -3}
        p.send({"id": n, "callback": {"cb": 1, "args": ["x"], "kwargs": {"$dict": []}}})
        assert p.read() == {"id": n, "callback_err": {"builtin": "TypeError", "classes": []}}
        # a call from inside the callback: nested
        p.send({"id": n, "callback": {"cb": 1, "args": [ref(6, OBJ)], "kwargs": {"$dict": []}}})
        m, req = p.call("len")
        assert req == {"op": "len", "obj": {"$ref": 6}}
        p.send({"id": m, "ok": 4})
        assert p.read() == {"id": n, "callback_ok": -4}
        p.send({"id": n, "ok": None, "subject_ns": 5})

    broker(script)
    h = subject.put([3, 1, 2])

    def key(x):
        if isinstance(x, infradev_probe.Handle):  # len() of a handle is asked explicitly
            return -infradev_probe.subject_op(x, "__len__")
        return -x

    assert h.sort(key=key) is None
    assert subject.last_subject_ns == 5


def test_an_abandoned_call_is_drained_first(broker):
    class Stop(BaseException):
        pass

    def script(p):
        n, req = p.call("call")
        p.send({"id": n, "callback": {"cb": 1, "args": [], "kwargs": {"$dict": []}}})
        assert p.read() == {"id": n, "callback_err": {"builtin": None, "classes": []}}
        # the subject goes on and calls back again: the judge has left, so it refuses
        p.send({"id": n, "callback": {"cb": 1, "args": [], "kwargs": {"$dict": []}}})
        assert p.read() == {"id": n, "callback_err": {"builtin": "RuntimeError", "classes": []}}
        p.send({"id": n, "ok": ref(9, OBJ)})
        assert p.read() == {"op": "event", "event": {"event": "x"}}
        assert p.ok(None, "release")["refs"] == [9]
        p.ok(1, "put")

    broker(script)
    c = _core.current_client()
    fn = _core.Handle(c, 8, c.generation, FUNC)
    c.pinned.add(8)

    def stop():
        raise Stop()

    with pytest.raises(Stop):
        fn(stop)
    c.event({"event": "x"})
    c.flush_releases()
    assert subject.put(1) == 1


def test_handles_are_released(broker):
    def script(p):
        p.ok(ref(5, OBJ), "put")
        p.ok(ref(6, OBJ), "put")
        assert p.ok(None, "release") == {"op": "release", "refs": [5]}

    broker(script)
    a = subject.put(1)
    b = subject.put(2)
    del a
    gc.collect()
    subject.release()
    assert b is not None


def test_batch(broker):
    def script(p):
        import_and_getattr(p, "obj", ref(2, OBJ))
        p.ok(ref(3, METHOD), "getattr")
        req = p.ok([{"ok": 1}, {"err": {"builtin": "KeyError", "classes": []}}, {"ok": [2]},
                    {"ok": 4}], "batch")
        assert req["reqs"] == [
            {"op": "call_method", "obj": {"$ref": 2}, "name": "step", "args": [0],
             "kwargs": {"$dict": []}},
            {"op": "call_method", "obj": {"$ref": 2}, "name": "step", "args": [1],
             "kwargs": {"$dict": []}},
            {"op": "getattr", "obj": {"$ref": 2}, "name": "items"},
            {"op": "len", "obj": {"$ref": 2}},
        ]

    broker(script)
    obj = subject.module("pkg").obj
    obj.step  # learn that step is a method
    with subject.batch() as b:
        first = b.call(obj.step, 0)
        second = b.call(obj.step, 1)
        b.getattr(obj, "items")
        b.len(obj)
    assert first.value == 1 and first.error is None
    assert isinstance(second.error, KeyError)
    with pytest.raises(KeyError):
        b.results
    assert b.errors[0] is None and b.errors[2] is None
    assert [item.value for item in b.items if item.ok] == [1, [2], 4]


def test_signature_and_inspect(broker):
    params = {"params": [
        {"name": "num_blocks", "kind": "POSITIONAL_OR_KEYWORD"},
        {"name": "block_size", "kind": "POSITIONAL_OR_KEYWORD", "default": 16},
        {"name": "kw", "kind": "KEYWORD_ONLY", "default": {"$tuple": []}},
    ]}

    def script(p):
        import_and_getattr(p, "BlockAllocator", ref(2, CLS))
        assert p.ok(params, "signature") == {"op": "signature", "obj": {"$ref": 2}}
        p.ok(params, "signature")
        p.ok({"params": [{"name": "not an identifier", "kind": "POSITIONAL_ONLY"}]}, "signature")

    broker(script)
    cls = subject.module("pkg").BlockAllocator
    sig = subject.signature(cls)
    assert isinstance(sig, inspect.Signature)
    assert str(sig) == "(num_blocks, block_size=16, *, kw=())"
    ps = inspect.signature(cls).parameters  # through __signature__
    assert list(ps) == ["num_blocks", "block_size", "kw"] and ps["block_size"].default == 16
    with pytest.raises(wire.ProtocolError):
        subject.signature(cls)


def test_what_cannot_be_sent(broker):
    def script(p):
        p.err({"builtin": "infradev.NotEncodable", "classes": []}, "fetch")

    broker(script)
    with pytest.raises(TypeError):
        subject.put(object())
    c = _core.current_client()
    h = _core.Handle(c, 3, c.generation, OBJ)
    c.pinned.add(3)
    with pytest.raises(NotEncodable):
        subject.fetch(h)
    assert subject.fetch([1]) == [1]  # local values are returned as they are


def test_replies_of_any_other_shape_are_protocol_errors(broker):
    # The broker sends only these shapes; a frame that is two things at once (the red team's
    # reply that is also a callback) is never taken for either.
    bad = [
        lambda n: {"id": n, "ok": None, "callback": {}},
        lambda n: {"id": n, "ok": None, "op": "started", "nodeid": "x"},
        lambda n: {"id": n, "ok": None, "err": {"builtin": None, "classes": []}},
        lambda n: {"id": n, "err": {"builtin": None, "classes": []}, "extra": 1},
        lambda n: {"id": n, "callback": {"cb": 1, "args": [], "kwargs": {"$dict": []}},
                   "subject_ns": 1},
        lambda n: {"id": n, "fault": "crashed"},
        lambda n: {"id": n},
    ]

    def script(p):
        for frame in bad:
            n, _ = p.call("call")
            p.send(frame(n))
            p.send({"id": n, "ok": None})  # drained before the next call
        p.ok(1, "put")

    broker(script)
    c = _core.current_client()
    fn = _core.Handle(c, 8, c.generation, FUNC)
    c.pinned.add(8)
    for frame in bad:
        with pytest.raises(wire.ProtocolError):
            fn()
    assert subject.put(1) == 1


def test_start_is_answered_with_its_own_node_id(broker):
    def script(p):
        for answer in ({"op": "started", "nodeid": "other"},
                       {"op": "started", "nodeid": "t", "id": 1, "ok": None},
                       {"op": "started", "nodeid": "t"}):
            assert p.read() == {"op": "event", "event": {"event": "start", "nodeid": "t"}}
            p.send(answer)

    broker(script)
    c = _core.current_client()
    for _ in range(2):
        with pytest.raises(wire.ProtocolError):
            c.start("t")
    c.start("t")


def test_a_callback_never_handed_out_ends_the_call(broker):
    def script(p):
        n, req = p.call("call")
        assert req["args"] == [{"$callback": 1}]
        p.send({"id": n, "callback": {"cb": 99, "args": [], "kwargs": {"$dict": []}}})
        assert p.read() == {"id": n, "callback_err": {"builtin": "Exception", "classes": []}}
        p.send({"id": n, "ok": None})  # the subject goes on: drained later
        n, _ = p.call("call")
        p.send({"id": n, "callback": {"cb": 1, "args": [], "kwargs": {"$dict": []},
                                      "extra": 1}})
        p.read()
        p.send({"id": n, "ok": None})
        p.ok(1, "put")

    broker(script)
    c = _core.current_client()
    fn = _core.Handle(c, 8, c.generation, FUNC)
    c.pinned.add(8)
    called = []
    with pytest.raises(wire.ProtocolError):
        fn(called.append)
    with pytest.raises(wire.ProtocolError):
        fn(called.append)
    assert called == []
    assert subject.put(1) == 1
