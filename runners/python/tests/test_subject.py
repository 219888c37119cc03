"""The subject server (runners/python/subject/infradev_subject.py), started as the sandbox starts
it (``python3 -I``), with the test speaking the broker's side of its socket."""

import sys
import time

import pytest

from conftest import SECRET, need_numpy, wire

NO_KW = {"$dict": []}


def mod(s, name="subjpkg"):
    return s.ref({"op": "import", "module": name})


def counter(s, *args):
    m = mod(s)
    return s.ref({"op": "call_method", "obj": {"$ref": m}, "name": "Counter", "args": list(args),
                  "kwargs": NO_KW})


def test_hello_comes_before_the_repository_is_importable(start_subject):
    s = start_subject(welcome=False)
    assert s.hello["op"] == "hello"
    assert s.hello["pid"] == s.proc.pid
    assert s.hello["python"] == "%d.%d.%d" % sys.version_info[:3]
    s.send({"op": "welcome", "generation": 4})
    # -I: PYTHONPATH is ignored; the repository is on sys.path only now.
    sysmod = mod(s, "sys")
    path = s.ok({"op": "getattr", "obj": {"$ref": sysmod}, "name": "path"})
    assert "/nonexistent-pythonpath-is-ignored" not in path
    assert path[0].endswith("repo")
    assert not any(p.endswith("subject") for p in path)


def test_import_getattr_and_describe(subj):
    m = subj.ok({"op": "import", "module": "subjpkg"})
    assert m["describe"] == {"kind": "module", "callable": False, "exception": False,
                             "builtin": None}
    assert subj.ok({"op": "getattr", "obj": {"$ref": m["$ref"]}, "name": "__version__"}) == "1.2.3"
    cls = subj.ok({"op": "getattr", "obj": {"$ref": m["$ref"]}, "name": "Counter"})
    assert cls["describe"] == {"kind": "class", "callable": True, "exception": False,
                               "builtin": None}
    err = subj.ok({"op": "getattr", "obj": {"$ref": m["$ref"]}, "name": "CounterError"})
    assert err["describe"] == {"kind": "class", "callable": True, "exception": True,
                               "builtin": "RuntimeError"}
    fn = subj.ok({"op": "getattr", "obj": {"$ref": m["$ref"]}, "name": "add"})
    assert fn["describe"]["kind"] == "function"
    c = counter(subj, 5)
    bound = subj.ok({"op": "getattr", "obj": {"$ref": c}, "name": "bump"})
    assert bound["describe"]["kind"] == "method"
    builtin = subj.ok({"op": "getattr", "obj": {"$ref": c}, "name": "__len__"})
    assert builtin["describe"]["kind"] == "method"
    # The same object is the same handle.
    again = subj.ok({"op": "getattr", "obj": {"$ref": m["$ref"]}, "name": "Counter"})
    assert again["$ref"] == cls["$ref"]
    assert subj.ok({"op": "describe", "obj": {"$ref": c}}) == {
        "kind": "object", "callable": False, "exception": False, "builtin": None}


def test_calls_and_values(subj):
    c = counter(subj, 10)
    assert subj.ok({"op": "call_method", "obj": {"$ref": c}, "name": "bump", "args": [2],
                    "kwargs": NO_KW}) == 12
    assert subj.ok({"op": "getattr", "obj": {"$ref": c}, "name": "value"}) == 12
    assert subj.ok({"op": "setattr", "obj": {"$ref": c}, "name": "step",
                    "value": 10}) is None
    assert subj.ok({"op": "call_method", "obj": {"$ref": c}, "name": "bump",
                    "args": [], "kwargs": {"$dict": [["n", 3]]}}) == 42
    m = mod(subj)
    pair = subj.ok({"op": "call_method", "obj": {"$ref": m}, "name": "make_pair", "args": [],
                    "kwargs": NO_KW})
    assert pair["$tuple"][0] == 1 and set(pair["$tuple"][1]) == {"$ref", "describe"}
    # keep: a handle even for what could cross by value
    kept = subj.ok({"op": "call_method", "obj": {"$ref": c}, "name": "bump", "args": [],
                    "kwargs": NO_KW, "keep": True})
    assert set(kept) == {"$ref", "describe"}
    assert subj.ok({"op": "fetch", "obj": {"$ref": kept["$ref"]}}) == 52
    assert subj.ok({"op": "len", "obj": {"$ref": c}}) == 52
    assert subj.ok({"op": "bool", "obj": {"$ref": c}}) is True
    assert subj.ok({"op": "binop", "binop": "add", "a": {"$ref": kept["$ref"]}, "b": 8}) == 60
    assert subj.ok({"op": "binop", "binop": "lt", "a": 1, "b": {"$ref": kept["$ref"]}}) is True
    assert subj.ok({"op": "unop", "unop": "neg", "a": {"$ref": kept["$ref"]}}) == -52
    assert isinstance(subj.ok({"op": "hash", "obj": {"$ref": kept["$ref"]}}), int)


def test_containers(subj):
    h = subj.ref({"op": "put", "value": {"$dict": [["a", [1, 2]]]}})
    assert subj.ok({"op": "getitem", "obj": {"$ref": h}, "key": "a"}) == [1, 2]
    assert subj.ok({"op": "setitem", "obj": {"$ref": h}, "key": "b", "value": {"$tuple": []}}) is None
    assert subj.ok({"op": "contains", "obj": {"$ref": h}, "item": "b"}) is True
    assert subj.ok({"op": "iter", "obj": {"$ref": h}}) == ["a", "b"]
    assert subj.ok({"op": "delitem", "obj": {"$ref": h}, "key": "a"}) is None
    assert subj.ok({"op": "fetch", "obj": {"$ref": h}}) == {"$dict": [["b", {"$tuple": []}]]}
    assert "keys" in subj.ok({"op": "dir", "obj": {"$ref": h}})
    # put makes a handle to a subject-side copy, which calls may change in place
    lst = subj.ref({"op": "put", "value": [3, 1, 2]})
    subj.ok({"op": "call_method", "obj": {"$ref": lst}, "name": "sort", "args": [],
             "kwargs": NO_KW})
    assert subj.ok({"op": "fetch", "obj": {"$ref": lst}}) == [1, 2, 3]


def test_isinstance_issubclass(subj):
    m = mod(subj)
    cls = subj.ref({"op": "getattr", "obj": {"$ref": m}, "name": "Counter"})
    err = subj.ref({"op": "getattr", "obj": {"$ref": m}, "name": "CounterError"})
    c = counter(subj)
    assert subj.ok({"op": "isinstance", "obj": {"$ref": c}, "cls": {"$ref": cls}}) is True
    assert subj.ok({"op": "isinstance", "obj": {"$ref": c}, "cls": [{"$ref": err}]}) is False
    builtins_ = mod(subj, "builtins")
    rt = subj.ref({"op": "getattr", "obj": {"$ref": builtins_}, "name": "RuntimeError"})
    assert subj.ok({"op": "issubclass", "cls": {"$ref": err}, "base": {"$ref": rt}}) is True


def test_signature(subj):
    m = mod(subj)
    fn = subj.ref({"op": "getattr", "obj": {"$ref": m}, "name": "add"})
    sig = subj.ok({"op": "signature", "obj": {"$ref": fn}})
    assert sig == {"params": [
        {"name": "a", "kind": "POSITIONAL_OR_KEYWORD"},
        {"name": "b", "kind": "POSITIONAL_OR_KEYWORD", "default": 2},
        {"name": "rest", "kind": "VAR_POSITIONAL"},
        {"name": "c", "kind": "KEYWORD_ONLY"},
        {"name": "d", "kind": "KEYWORD_ONLY", "default": None},
        {"name": "kw", "kind": "VAR_KEYWORD"},
    ]}
    cls = subj.ref({"op": "getattr", "obj": {"$ref": m}, "name": "Counter"})
    sig = subj.ok({"op": "signature", "obj": {"$ref": cls}})
    assert [p["name"] for p in sig["params"]] == ["start", "step"]
    builtins_ = mod(subj, "builtins")
    obj = subj.ref({"op": "getattr", "obj": {"$ref": builtins_}, "name": "object"})
    inst = subj.ref({"op": "call", "obj": {"$ref": obj}, "args": [], "kwargs": NO_KW})
    assert subj.err({"op": "signature", "obj": {"$ref": inst}})["builtin"] == "TypeError"


def test_exceptions_carry_no_text(subj):
    m = mod(subj)
    err_cls = subj.ref({"op": "getattr", "obj": {"$ref": m}, "name": "CounterError"})
    c = counter(subj)

    def fail(kind):
        return subj.err({"op": "call_method", "obj": {"$ref": c}, "name": "fail",
                         "args": [kind], "kwargs": NO_KW})

    assert fail("key") == {"builtin": "KeyError", "classes": []}
    assert fail("value") == {"builtin": "ValueError", "classes": []}
    assert fail("counter") == {"builtin": "RuntimeError", "classes": [err_cls]}
    # SubError(CounterError, KeyError): the first allow-listed base in its MRO
    assert fail("sub") == {"builtin": "RuntimeError", "classes": [err_cls]}
    assert fail("exit") == {"builtin": None, "classes": []}  # SystemExit is not allow-listed
    # A missing attribute, a wrong call
    assert subj.err({"op": "getattr", "obj": {"$ref": c}, "name": "nope"})["builtin"] == "AttributeError"
    assert subj.err({"op": "call_method", "obj": {"$ref": c}, "name": "bump",
                     "args": [1, 2, 3], "kwargs": NO_KW})["builtin"] == "TypeError"
    assert subj.err({"op": "import", "module": "no_such_module"})["builtin"] == "ModuleNotFoundError"
    # The subject lives on after SystemExit
    assert subj.ok({"op": "getattr", "obj": {"$ref": c}, "name": "value"}) == 0


def test_a_secret_in_an_exception_never_crosses(subj):
    core = mod(subj, "subjpkg.core")
    fn = subj.ref({"op": "getattr", "obj": {"$ref": core}, "name": "raise_secret"})
    err = subj.err({"op": "call", "obj": {"$ref": fn}, "args": [SECRET], "kwargs": NO_KW})
    assert err == {"builtin": "Exception", "classes": []}
    # in a batch, too
    out = subj.ok({"op": "batch", "reqs": [
        {"op": "call", "obj": {"$ref": fn}, "args": [SECRET], "kwargs": NO_KW}]})
    assert out == [{"err": {"builtin": "Exception", "classes": []}}]
    frames = b"".join(subj.received)
    # The judge sent the secret as an argument; the subject never sends it back.
    assert SECRET.encode() not in frames
    assert SECRET.replace("-", "_").encode() not in frames


def test_internal_errors_are_named(subj):
    assert subj.err({"op": "getattr", "obj": {"$ref": 999}, "name": "x"}) == {
        "builtin": "infradev.StaleHandle", "classes": []}
    assert subj.err({"op": "frobnicate"})["builtin"] == "infradev.ProtocolError"
    assert subj.err({"op": "put", "value": {"$nope": 1}})["builtin"] == "infradev.ProtocolError"
    assert subj.err({"op": "put", "value": 2 ** 70})["builtin"] == "infradev.ProtocolError"
    pair = subj.ok({"op": "call_method", "obj": {"$ref": mod(subj)}, "name": "make_pair",
                    "args": [], "kwargs": NO_KW})
    h = pair["$tuple"][1]["$ref"]
    assert subj.err({"op": "fetch", "obj": {"$ref": h}})["builtin"] == "infradev.NotEncodable"


def test_release(subj):
    c = counter(subj)
    assert subj.ok({"op": "release", "refs": [c, 12345]}) is None
    assert subj.err({"op": "len", "obj": {"$ref": c}})["builtin"] == "infradev.StaleHandle"
    # A released object gets a new handle when it comes back.
    m = mod(subj)
    a = subj.ref({"op": "getattr", "obj": {"$ref": m}, "name": "Counter"})
    subj.ok({"op": "release", "refs": [a]})
    b = subj.ref({"op": "getattr", "obj": {"$ref": m}, "name": "Counter"})
    assert b != a


def test_batch(subj):
    c = counter(subj)
    out = subj.ok({"op": "batch", "reqs": [
        {"op": "call_method", "obj": {"$ref": c}, "name": "bump", "args": [1], "kwargs": NO_KW},
        {"op": "call_method", "obj": {"$ref": c}, "name": "fail", "args": ["key"],
         "kwargs": NO_KW},
        {"op": "call_method", "obj": {"$ref": c}, "name": "bump", "args": [1], "kwargs": NO_KW},
        {"op": "batch", "reqs": []},
        {"op": "getattr", "obj": {"$ref": c}, "name": "value", "keep": True},
    ]})
    assert out[:3] == [{"ok": 1}, {"err": {"builtin": "KeyError", "classes": []}}, {"ok": 2}]
    assert out[3] == {"err": {"builtin": "infradev.ProtocolError", "classes": []}}
    assert set(out[4]["ok"]) == {"$ref", "describe"}


def test_callbacks(subj):
    c = counter(subj)
    n = subj.next_id
    subj.send({"id": n, "req": {"op": "call_method", "obj": {"$ref": c}, "name": "apply",
                                "args": [{"$callback": 7}, 5],
                                "kwargs": {"$dict": [["k", [1]]]}}})
    subj.next_id += 1
    msg = subj.read()
    assert msg == {"id": n, "callback": {"cb": 7, "args": [5], "kwargs": {"$dict": [["k", [1]]]}}}
    # The judge calls the subject from inside its callback (nested request).
    subj.send({"id": 900, "req": {"op": "getattr", "obj": {"$ref": c}, "name": "value"}})
    assert subj.read() == {"id": 900, "ok": 0}
    subj.send({"id": n, "callback_ok": {"$tuple": ["done"]}})
    assert subj.read() == {"id": n, "ok": {"$tuple": ["done"]}}

    # A callback that fails: the subject sees an exception of the class the judge named.
    m = mod(subj)
    err = subj.ref({"op": "getattr", "obj": {"$ref": m}, "name": "CounterError"})
    n = subj.next_id
    subj.next_id += 1
    subj.send({"id": n, "req": {"op": "call_method", "obj": {"$ref": c}, "name": "apply",
                                "args": [{"$callback": 7}], "kwargs": NO_KW}})
    assert "callback" in subj.read()
    subj.send({"id": n, "callback_err": {"builtin": "RuntimeError", "classes": [err]}})
    assert subj.read() == {"id": n, "err": {"builtin": "RuntimeError", "classes": [err]}}

    # A stub called from another thread fails in the subject (frames stay in order).
    core = mod(subj, "subjpkg.core")
    out = subj.ok({"op": "call_method", "obj": {"$ref": core}, "name": "call_in_thread",
                   "args": [{"$callback": 7}], "kwargs": NO_KW})
    assert out == "RuntimeError"
    assert subj.ok({"op": "getattr", "obj": {"$ref": c}, "name": "value"}) == 0


def test_printing_cannot_corrupt_frames(subj):
    c = counter(subj)
    assert subj.ok({"op": "call_method", "obj": {"$ref": c}, "name": "noisy", "args": [],
                    "kwargs": NO_KW}) == "quiet"
    assert subj.ok({"op": "getattr", "obj": {"$ref": c}, "name": "value"}) == 0
    subj.close()
    assert subj.proc.stdout.read() == b""
    assert subj.proc.stderr.read() == b""


def test_stderr_kept_for_debugging(start_subject):
    s = start_subject({"INFRADEV_SUBJECT_STDERR": "keep"})
    c = counter(s)
    s.ok({"op": "call_method", "obj": {"$ref": c}, "name": "noisy", "args": [], "kwargs": NO_KW})
    s.close()
    assert s.proc.stdout.read() == b""
    assert b"raw stderr bytes" in s.proc.stderr.read()


def test_large_results_come_back_as_handles(subj):
    h = subj.ref({"op": "put", "value": "x"})
    big = subj.ok({"op": "binop", "binop": "mul", "a": {"$ref": h}, "b": 20 * 1024 * 1024})
    assert set(big) == {"$ref", "describe"}  # over the string cap
    part = subj.ok({"op": "binop", "binop": "mul", "a": {"$ref": h}, "b": 15 * 1024 * 1024,
                    "keep": True})
    out = subj.ok({"op": "binop", "binop": "mul", "a": [{"$ref": part["$ref"]}], "b": 5})
    assert set(out) == {"$ref", "describe"}  # 5 strings of 15 MiB: over the frame cap
    assert subj.err({"op": "fetch", "obj": {"$ref": out["$ref"]}})["builtin"] == "infradev.NotEncodable"


def test_ndarray_arguments(subj):
    np = need_numpy()
    codec = wire.Codec()
    arr = codec.encode(np.arange(6, dtype=np.float32).reshape(2, 3))
    h = subj.ref({"op": "put", "value": arr})
    total = subj.ok({"op": "call_method", "obj": {"$ref": h}, "name": "sum", "args": [],
                     "kwargs": NO_KW})
    assert codec.decode(total) == 15.0
    back = subj.ok({"op": "fetch", "obj": {"$ref": h}})
    assert codec.decode(back).tolist() == [[0, 1, 2], [3, 4, 5]]


def test_the_subject_ends_when_the_broker_hangs_up(subj):
    subj.conn.close()
    subj.reader.close()
    assert subj.proc.wait(timeout=10) == 0


def test_hot_path_cost(subj):
    """The subject's own cost of a small call_method round trip stays far below 100 us; the
    figure printed includes the socket's round trip on this machine."""
    c = counter(subj)
    req = {"op": "call_method", "obj": {"$ref": c}, "name": "bump", "args": [1], "kwargs": NO_KW}
    frame_for = [wire.pack({"id": i, "req": req}) for i in range(2000)]
    send, read = subj.conn.sendall, subj.reader.read
    t = time.perf_counter()
    for f in frame_for:
        send(f)
        read()
    per_call = (time.perf_counter() - t) / len(frame_for)
    print("call_method round trip: %.1f us" % (per_call * 1e6))
    assert per_call < 0.002  # generous: a loaded CI machine


def deepest(levels, leaf):
    """A value ``levels`` dicts deep: each dict level is 3 JSON levels (``$dict``, pairs, pair)."""
    v = leaf
    for _ in range(levels):
        v = {"k": v}
    return v


def test_values_at_the_depth_limit_cross_both_ways(subj):
    judge = wire.Codec(decode_ref=lambda tag: tag)
    value = deepest(wire.MAX_DEPTH, complex(1, float("inf")))
    w = wire.Codec().encode(value)
    h = subj.ref({"op": "put", "value": w})
    assert judge.decode(subj.ok({"op": "fetch", "obj": {"$ref": h}})) == value

    # The subject builds [value] (one level more) and passes it to a judge callback: the
    # arguments cross as one list value, so the judge can decode what the subject encoded.
    c = counter(subj)
    n = subj.next_id
    subj.next_id += 1
    subj.send({"id": n, "req": {"op": "call_method", "obj": {"$ref": c}, "name": "apply",
                                "args": [{"$callback": 1}, [{"$ref": h}]], "kwargs": NO_KW}})
    msg = subj.read()
    args = judge.decode(msg["callback"]["args"])
    assert type(args) is list and len(args) == 1
    assert judge.decode(msg["callback"]["kwargs"]) == {}
    subj.send({"id": n, "callback_ok": None})
    assert subj.read() == {"id": n, "ok": None}
