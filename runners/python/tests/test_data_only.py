"""The judge decides on data only (docs/probe-protocol.md): written as the submission that
lies about its own values would be, by someone who has read the library's source.

- An operator on a handle (``==``, ``<``, ``in``, ``len``, ``bool``, ``hash``, iteration,
  arithmetic, ``int``...) raises HandleOperatorError in the judge and sends nothing.
- ``subject_op`` asks for the subject's own answer explicitly, with the wire request the
  operator would have needed.
- End to end, against the real subject server and a hostile submission: builtin subclasses
  whose every method lies cross as the value they hold, objects that pretend to be builtins
  cross as handles, and a probe written naively (``assert f() == 8``) cannot be fooled."""

import math
import os
import socket
import textwrap
import threading

import pytest

from conftest import wire
from test_judge import METHOD, MOD, OBJ, broker, ref  # noqa: F401 (fixture)
from test_ranks import rank_ok, start_group, stop_group

from infradev_probe import (
    Handle,
    HandleOperatorError,
    NotEncodable,
    StaleHandle,
    SubjectCrashed,
    subject,
    subject_op,
)
from infradev_probe import _core

# Every way a probe can hand a handle to an operator, with the dunder name the error names.
OPERATIONS = [
    ("__eq__", lambda h: h == 8), ("__eq__", lambda h: 8 == h),
    ("__ne__", lambda h: h != 8), ("__lt__", lambda h: h < 8), ("__le__", lambda h: h <= 8),
    ("__gt__", lambda h: h > 8), ("__ge__", lambda h: h >= 8), ("__gt__", lambda h: 8 < h),
    ("__eq__", lambda h: [h] == [8]), ("__eq__", lambda h: {"k": h} == {"k": 8}),
    ("__eq__", lambda h: 8 in [h]), ("__eq__", lambda h: [1, 8].index(h)),
    ("__lt__", lambda h: sorted([h, h])), ("__gt__", lambda h: max([1, h])),
    ("__bool__", lambda h: bool(h)), ("__bool__", lambda h: not h),
    ("__bool__", lambda h: 1 if h else 0), ("__bool__", lambda h: h and 1),
    ("__bool__", lambda h: all([h])), ("__len__", lambda h: len(h)),
    ("__contains__", lambda h: 8 in h), ("__contains__", lambda h: 8 not in h),
    ("__hash__", lambda h: hash(h)), ("__hash__", lambda h: {h: 1}), ("__hash__", lambda h: {h}),
    ("__iter__", lambda h: list(h)), ("__iter__", lambda h: tuple(h)),
    ("__iter__", lambda h: [x for x in h]), ("__iter__", lambda h: sum(h)),
    ("__iter__", lambda h: dict.fromkeys(h)), ("__bytes__", lambda h: bytes(h)),
    ("__reversed__", lambda h: reversed(h)),
    ("__add__", lambda h: h + 1), ("__radd__", lambda h: 1 + h), ("__sub__", lambda h: h - 1),
    ("__rsub__", lambda h: 1 - h), ("__mul__", lambda h: h * 2), ("__rmul__", lambda h: 2 * h),
    ("__truediv__", lambda h: h / 2), ("__floordiv__", lambda h: h // 2),
    ("__mod__", lambda h: h % 2), ("__rmod__", lambda h: 5 % h),
    ("__pow__", lambda h: h ** 2), ("__rpow__", lambda h: 2 ** h),
    ("__matmul__", lambda h: h @ h), ("__and__", lambda h: h & 1), ("__or__", lambda h: h | 1),
    ("__xor__", lambda h: h ^ 1), ("__lshift__", lambda h: h << 1),
    ("__rshift__", lambda h: h >> 1), ("__ror__", lambda h: 1 | h),
    ("__neg__", lambda h: -h), ("__pos__", lambda h: +h), ("__abs__", lambda h: abs(h)),
    ("__invert__", lambda h: ~h),
    ("__index__", lambda h: [0, 1][h]), ("__index__", lambda h: range(h)),
    ("__index__", lambda h: hex(h)), ("__int__", lambda h: int(h)),
    ("__float__", lambda h: float(h)), ("__float__", lambda h: math.sqrt(h)),
    ("__floor__", lambda h: math.floor(h)),
    ("__complex__", lambda h: complex(h)), ("__round__", lambda h: round(h)),
    ("__trunc__", lambda h: math.trunc(h)), ("__ceil__", lambda h: math.ceil(h)),
    ("__divmod__", lambda h: divmod(h, 2)), ("__rdivmod__", lambda h: divmod(2, h)),
]


def _augmented(name):
    def run(h):
        x = h
        exec("x %s= 2" % {"iadd": "+", "isub": "-", "imul": "*", "itruediv": "/",
                          "ifloordiv": "//", "imod": "%", "ipow": "**", "imatmul": "@",
                          "iand": "&", "ior": "|", "ixor": "^", "ilshift": "<<",
                          "irshift": ">>"}[name], {}, {"x": x})
    return ("__%s__" % name, run)


OPERATIONS += [_augmented(n) for n in ("iadd", "isub", "imul", "itruediv", "ifloordiv", "imod",
                                       "ipow", "imatmul", "iand", "ior", "ixor", "ilshift",
                                       "irshift")]


@pytest.mark.parametrize("name,operation", OPERATIONS,
                         ids=["%s-%d" % (n, i) for i, (n, _) in enumerate(OPERATIONS)])
def test_an_operator_on_a_handle_raises_and_sends_nothing(broker, name, operation):
    def script(p):
        assert p.ok(1, "put") == {"op": "put", "value": 7}  # the first request after hello

    broker(script)
    c = _core.current_client()
    h = Handle(c, 5, c.generation, OBJ)
    c.pinned.add(5)
    with pytest.raises(HandleOperatorError) as info:
        operation(h)
    e = info.value
    assert isinstance(e, TypeError) and e.operator == name
    assert name in str(e) and "subject.fetch" in str(e) and "subject_op" in str(e)
    assert subject.put(7) == 1  # nothing was sent before it: the connection is in step
    assert c.stack == [] and c.calls == 1


def test_every_refused_operator_is_listed_and_raises():
    c = type("C", (), {"generation": 1, "rank": None})()
    h = Handle(c, 3, 1, OBJ)
    assert set(_core.REFUSED_OPERATORS) >= {
        "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__",
        "__contains__", "__hash__", "__iter__", "__index__", "__int__", "__float__",
        "__add__", "__radd__", "__iadd__", "__matmul__", "__rmatmul__", "__neg__"}
    for name in _core.REFUSED_OPERATORS:
        for args in ((), (1,)):
            with pytest.raises(HandleOperatorError) as info:
                getattr(type(h), name)(h, *args)
            assert info.value.operator == name


def test_methods_and_module_proxies_refuse_too(broker):
    def script(p):
        assert p.ok(ref(1, MOD), "import") == {"op": "import", "module": "pkg"}
        p.ok(ref(2, OBJ), "getattr")
        p.ok(ref(3, METHOD), "getattr")
        p.ok(ref(2, OBJ), "getattr")
        p.ok(4, "call_method")

    broker(script)
    pkg = subject.module("pkg")
    obj = pkg.obj
    method = obj.step
    for op, name in ((lambda: pkg == pkg, "__eq__"), (lambda: hash(pkg), "__hash__"),
                     (lambda: len(pkg), "__len__"), (lambda: bool(pkg), "__bool__"),
                     (lambda: method == method, "__eq__"), (lambda: method != 1, "__ne__"),
                     (lambda: hash(method), "__hash__"), (lambda: {method}, "__hash__")):
        with pytest.raises(HandleOperatorError) as info:
            op()
        assert info.value.operator == name
    assert pkg is subject.module("pkg") and obj is pkg.obj  # identity is the judge's own
    assert method() == 4


def test_values_are_data_and_the_judge_compares_them(broker):
    """What crosses by value is a plain local object: ==, len, in and hash are the judge's."""
    def script(p):
        p.ok(ref(1, MOD), "import")
        p.ok({"$tuple": [1, {"$dict": [["a", [1, 2]]]}, {"$set": [3]}]}, "getattr")

    broker(script)
    v = subject.module("pkg").value
    assert v == (1, {"a": [1, 2]}, {3}) and hash(v[0]) == hash(1) and 3 in v[2] and len(v) == 3
    assert type(v) is tuple and type(v[1]) is dict and type(v[1]["a"]) is list


SUBJECT_OP_REQUESTS = [
    (("__eq__", 8), {"op": "binop", "binop": "eq", "a": {"$ref": 5}, "b": 8}),
    (("__ne__", 8), {"op": "binop", "binop": "ne", "a": {"$ref": 5}, "b": 8}),
    (("__lt__", [1]), {"op": "binop", "binop": "lt", "a": {"$ref": 5}, "b": [1]}),
    (("__add__", 1.5), {"op": "binop", "binop": "add", "a": {"$ref": 5}, "b": 1.5}),
    (("__radd__", 1), {"op": "binop", "binop": "add", "a": 1, "b": {"$ref": 5}}),
    (("__rmatmul__", (1,)), {"op": "binop", "binop": "matmul", "a": {"$tuple": [1]},
                             "b": {"$ref": 5}}),
    (("__neg__",), {"op": "unop", "unop": "neg", "a": {"$ref": 5}}),
    (("__invert__",), {"op": "unop", "unop": "invert", "a": {"$ref": 5}}),
    (("__len__",), {"op": "len", "obj": {"$ref": 5}}),
    (("__bool__",), {"op": "bool", "obj": {"$ref": 5}}),
    (("__hash__",), {"op": "hash", "obj": {"$ref": 5}}),
    (("__iter__",), {"op": "iter", "obj": {"$ref": 5}}),
    (("__contains__", "k"), {"op": "contains", "obj": {"$ref": 5}, "item": "k"}),
    (("__iadd__", 2), {"op": "call_method", "obj": {"$ref": 5}, "name": "__iadd__", "args": [2],
                       "kwargs": {"$dict": []}}),
    (("__index__",), {"op": "call_method", "obj": {"$ref": 5}, "name": "__index__", "args": [],
                      "kwargs": {"$dict": []}}),
]


def test_subject_op_asks_the_subject_explicitly(broker):
    answers = [True, False, ref(9, OBJ), 9.5, 2, 3, -1, 0, 4, True, 123, [1, 2], True, None, 7]

    def script(p):
        for (_, want), answer in zip(SUBJECT_OP_REQUESTS, answers):
            assert p.ok(answer) == want
        p.err({"builtin": "TypeError", "classes": []}, "binop")

    broker(script)
    c = _core.current_client()
    h = Handle(c, 5, c.generation, OBJ)
    c.pinned.add(5)
    got = [subject_op(h, *args) for args, _ in SUBJECT_OP_REQUESTS]
    assert got[:2] == [True, False] and isinstance(got[2], Handle) and got[3:] == answers[3:]
    with pytest.raises(TypeError) as info:  # the subject's own error, as from any call
        subject_op(h, "__lt__", 1)
    assert "in __lt__" in str(info.value)
    for bad in (("eq",), ("__eq",), ("", 1), (5,)):
        with pytest.raises(ValueError):
            subject_op(h, *bad)
    for args in (("__eq__",), ("__eq__", 1, 2), ("__len__", 1), ("__neg__", 1)):
        with pytest.raises(TypeError):
            subject_op(h, *args)


def test_subject_op_on_a_module_proxy_a_method_and_a_stale_handle(broker):
    def script(p):
        p.ok(ref(1, MOD), "import")
        assert p.ok(3, "len") == {"op": "len", "obj": {"$ref": 1}}
        p.ok(ref(2, OBJ), "getattr")
        p.ok(ref(3, METHOD), "getattr")
        p.ok(ref(4, METHOD), "getattr")  # resolving the method to send it
        assert p.ok(False, "binop") == {"op": "binop", "binop": "eq", "a": {"$ref": 4},
                                        "b": None}
        n, _ = p.call("call_method")
        p.send({"id": n, "fault": "crashed", "generation": 2})

    broker(script)
    pkg = subject.module("pkg")
    assert subject_op(pkg, "__len__") == 3
    obj = pkg.obj
    assert subject_op(obj.step, "__eq__", None) is False
    with pytest.raises(SubjectCrashed):
        obj.step()
    with pytest.raises(StaleHandle):
        subject_op(obj, "__eq__", 1)


def test_subject_op_on_a_rank_handle_asks_that_rank(broker):
    def script(p):
        start_group(p)
        rank_ok(p, 1, ref(5, OBJ), "put")
        assert rank_ok(p, 1, 2, "len") == {"op": "len", "obj": {"$ref": 5}}
        assert rank_ok(p, 1, True, "binop") == {"op": "binop", "binop": "eq",
                                                "a": {"$ref": 5}, "b": [1, 2]}
        stop_group(p)

    broker(script)
    with subject.ranks(2) as group:
        h = group[1].put([1, 2])
        with pytest.raises(HandleOperatorError):
            len(h)
        assert subject_op(h, "__len__") == 2
        assert subject_op(h, "__eq__", [1, 2]) is True


def test_the_plugin_reports_a_refused_operator_as_a_type_error():
    from infradev_probe import plugin

    assert plugin.exc_type_of(HandleOperatorError("__eq__", "==")) == "TypeError"


# ---- end to end: the judge library, a relay standing in for the broker, the real subject ----

HOSTILE = {
    "evilpkg/__init__.py": '''
        import collections
        import enum

        CALLED = []  # every lying method that ran, in order


        def _lie(name, answer):
            def method(self, *args, **kwargs):
                CALLED.append(name)
                return answer
            return method


        _LIES = dict(__eq__=True, __ne__=False, __lt__=True, __le__=True, __gt__=True,
                     __ge__=True, __hash__=8, __bool__=True, __len__=8, __contains__=True,
                     __index__=8, __int__=8, __float__=8.0, __str__="8", __repr__="8",
                     __getitem__=8, __add__=8, __radd__=8, __sub__=8, __mul__=8, copy=[8],
                     items=[("8", 8)], keys=["8"], values=[8], __reduce__=(int, (8,)),
                     __reduce_ex__=(int, (8,)))


        class Meta(type):
            """Pretends every class of it is a builtin, to whoever asks it."""

            def __eq__(cls, other):
                CALLED.append("Meta.__eq__")
                return True

            def __hash__(cls):
                CALLED.append("Meta.__hash__")
                return hash(int)

            def __instancecheck__(cls, obj):
                return True

            def __subclasscheck__(cls, sub):
                return True


        def liar(base):
            ns = {name: _lie(name, answer) for name, answer in _LIES.items()}
            ns["__iter__"] = lambda self: (CALLED.append("__iter__"), iter([8]))[1]
            ns["__class__"] = property(lambda self: base)
            return Meta("Lying" + base.__name__, (base,), ns)


        LyingInt, LyingFloat, LyingStr, LyingBytes = (liar(t) for t in (int, float, str, bytes))
        LyingList, LyingTuple, LyingDict, LyingSet = (liar(t) for t in (list, tuple, dict, set))


        class Eight(metaclass=Meta):
            """Not an int, whatever it says: equal to anything, 8 to every conversion."""

            __class__ = property(lambda self: int)


        for _name, _answer in _LIES.items():
            setattr(Eight, _name, _lie(_name, _answer))
        Eight.__iter__ = lambda self: (CALLED.append("__iter__"), iter([8]))[1]


        class Color(enum.IntEnum):
            RED = 5


        Point = collections.namedtuple("Point", "x y")


        def int_(): return LyingInt(5)
        def float_(): return LyingFloat(0.5)
        def str_(): return LyingStr("five")
        def bytes_(): return LyingBytes(b"5")
        def list_(): return LyingList([5, 6])
        def tuple_(): return LyingTuple((5,))
        def dict_(): return LyingDict({"five": 5})
        def set_(): return LyingSet({5})
        def nested(): return [LyingInt(1), {"k": LyingList([LyingStr("x")])}, (LyingFloat(2.0),)]
        def eight(): return Eight()
        def keyed():
            d = {Eight(): 1}  # built with the lying __hash__; what happens next is ours
            CALLED.clear()
            return d
        def color(): return Color.RED
        def point(): return Point(1, 2)
        def same(x): return x is Color.RED
        def field(p): return p.x
        def called(): return list(CALLED)
    ''',
}


class Relay:
    """The broker's part, as little of it as the judge library needs: the judge's hello is
    welcomed, its calls go to the subject and every subject frame comes back (callbacks
    included), and each request the subject is sent is recorded."""

    def __init__(self, s):
        self.s = s  # the test's SubjectConn: the subject said hello and was welcomed
        self.judge_sock, self.mine = socket.socketpair()
        self.reader = wire.FrameReader(self.mine)
        self.requests = []
        self.threads = [threading.Thread(target=t, daemon=True)
                        for t in (self._from_judge, self._from_subject)]
        for t in self.threads:
            t.start()

    def _from_judge(self):
        while True:
            try:
                msg = self.reader.read()
            except (OSError, ValueError, wire.ProtocolError):
                return
            if msg is None:
                return
            if msg.get("op") == "hello":
                self.mine.sendall(wire.pack({"op": "welcome", "generation": 1}))
            elif msg.get("op") == "call":
                self.requests.append(msg["req"])
                self.s.send({"id": msg["id"], "req": msg["req"]})
            elif "callback_ok" in msg or "callback_err" in msg:
                self.s.send(msg)

    def _from_subject(self):
        while True:
            try:
                msg = self.s.reader.read()
            except (OSError, ValueError, wire.ProtocolError):
                return
            if msg is None:
                return
            if "ok" in msg or "err" in msg:
                msg["subject_ns"] = 1
            self.mine.sendall(wire.pack(msg))

    def close(self):
        # Shut down (not just close) every socket a relay thread may be blocked on: the
        # subject sees the end of its connection and exits, and both threads return.
        for sock in (self.judge_sock, self.mine, self.s.conn):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self.threads:
            t.join(timeout=10)
        self.judge_sock.close()
        self.mine.close()


@pytest.fixture
def hostile(repo, start_subject):
    """The judge library connected, through a relay, to the real subject server importing a
    hostile submission (evilpkg). Yields (the submission's module proxy, the relay)."""
    for rel, text in HOSTILE.items():
        path = os.path.join(repo, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text).lstrip())
    relay = Relay(start_subject())
    relay.judge_sock.settimeout(30)
    client = _core.Client(relay.judge_sock)
    client.hello()
    old = _core.set_client(client)
    subject._modules.clear()
    try:
        yield subject.module("evilpkg"), relay
    finally:
        _core.set_client(old)
        subject._modules.clear()
        relay.close()


def test_lying_builtin_subclasses_cross_as_the_values_they_hold(hostile):
    evil, _ = hostile
    for fn, value in ((evil.int_, 5), (evil.float_, 0.5), (evil.str_, "five"),
                      (evil.bytes_, b"5"), (evil.list_, [5, 6]), (evil.tuple_, (5,)),
                      (evil.dict_, {"five": 5}), (evil.set_, {5})):
        got = fn()
        assert type(got) is type(value) and got == value, fn
        assert subject.fetch(subject.keep(fn)) == value  # fetched: the same base value
    assert evil.nested() == [1, {"k": ["x"]}, (2.0,)]
    # what a naive probe writes cannot be fooled by the lying __eq__/__len__/__hash__...
    with pytest.raises(AssertionError):
        assert evil.int_() == 8
    with pytest.raises(AssertionError):
        assert len(evil.list_()) == 8
    assert hash(evil.str_()) == hash("five") and 8 not in evil.list_()
    assert evil.called() == []  # none of the submission's lying methods ever ran


def test_an_impostor_is_a_handle_and_every_operator_on_it_raises(hostile):
    evil, relay = hostile
    h = evil.eight()
    assert isinstance(h, Handle)
    before = len(relay.requests)
    for name, operation in OPERATIONS:
        with pytest.raises(HandleOperatorError):
            operation(h)
    assert len(relay.requests) == before  # not one request for all of them
    with pytest.raises(NotEncodable):
        subject.fetch(h)
    # a dict keyed by it cannot be rebuilt in the judge: it comes back as a handle
    keyed = evil.keyed()
    assert isinstance(keyed, Handle)
    with pytest.raises(HandleOperatorError):
        len(keyed)
    assert evil.called() == []
    # asked explicitly, the subject gives its own (lying) answers: never a verdict
    assert subject_op(h, "__eq__", 9) is True
    assert subject_op(h, "__len__") == 8 and subject_op(h, "__iter__") == [8]
    assert subject_op(h, "__contains__", "anything") is True
    assert subject_op(h, "__index__") == 8
    assert evil.called() == ["__eq__", "__len__", "__iter__", "__contains__", "__index__"]


def test_records_keep_their_identity_and_attributes(hostile):
    evil, _ = hostile
    red, point = evil.color(), evil.point()
    assert isinstance(red, Handle) and isinstance(point, Handle)
    assert red.value == 5 and red.name == "RED" and point.x == 1
    assert evil.same(red) is True and evil.field(point) == 1  # passed back: the same objects
    assert subject.fetch(red) == 5 and subject.fetch(point) == (1, 2)
    with pytest.raises(HandleOperatorError):
        _ = red == 5
