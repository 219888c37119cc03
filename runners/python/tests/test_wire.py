"""The wire codec and framing (runners/python/subject/infradev_wire.py)."""

import collections
import enum
import math
import socket
import struct

import pytest

from conftest import need_numpy, need_torch, wire


class Obj:
    pass


def codec():
    """A codec whose handles are ("H", id) markers, for checking what became a handle."""
    table = {}

    def enc(obj):
        table[id(obj)] = obj
        return {"$ref": id(obj)}

    def dec(tag):
        return table[tag["$ref"]]

    return wire.Codec(encode_object=enc, decode_ref=dec, decode_callback=lambda n: ("cb", n))


def roundtrip(value):
    c = codec()
    data = c.encode(value)
    text = wire.dumps(data)
    return c.decode(wire.loads(b'{"v":' + text + b"}")["v"]), data


@pytest.mark.parametrize("value", [
    None, True, False, 0, -1, 2 ** 63 - 1, -2 ** 63, 1.5, -0.0, 1e300, "", "héllo ✓",
    [], [1, 2, 3], [1.5, 2.5], ["a", "b"], [True, None], [1, "a", [2, [3.0]]],
    (), (1, (2, 3)), {1, 2}, frozenset({"a"}), {}, {"a": 1, 2: [3], (1, 2): None},
    b"", b"\x00\xffbytes", complex(1, -2), slice(1, None, 2), Ellipsis,
    2 ** 63, -2 ** 63 - 1, 10 ** 100,
])
def test_round_trips(value):
    back, _ = roundtrip(value)
    assert back == value and type(back) is type(value)


def test_non_finite_floats_are_tagged():
    for x, tag in [(math.inf, "inf"), (-math.inf, "-inf"), (math.nan, "nan")]:
        back, data = roundtrip(x)
        assert data == {"$float": tag}
        assert (math.isnan(back) if tag == "nan" else back == x)
    back, data = roundtrip(complex(math.inf, 1))
    assert data == {"$complex": [{"$float": "inf"}, 1.0]} and back == complex(math.inf, 1)
    back, data = roundtrip([1.0, math.nan])
    assert data == [1.0, {"$float": "nan"}]


def test_big_ints_are_tagged_and_bounded():
    assert codec().encode(2 ** 64) == {"$int": str(2 ** 64)}
    assert codec().encode(2 ** 63 - 1) == 2 ** 63 - 1
    huge = 10 ** 5000  # more digits than int -> str allows: a handle
    assert set(codec().encode(huge)) == {"$ref"}


def test_dict_insertion_order_and_records_keep_identity():
    back, data = roundtrip({"b": 1, "a": 2})
    assert list(back) == ["b", "a"] and data == {"$dict": [["b", 1], ["a", 2]]}

    class Color(enum.IntEnum):
        RED = 1

    Point = collections.namedtuple("Point", "x y")
    for v in (Color.RED, Point(1, 2), bytearray(b"x"), Obj()):
        assert set(codec().encode(v)) == {"$ref"}, v
    # fetched, a record is its base value; an OrderedDict is a dict, in its own order
    assert codec().encode(Color.RED, strict=True) == 1
    assert codec().encode(Point(1, 2), strict=True) == {"$tuple": [1, 2]}
    od = collections.OrderedDict(a=1, b=2)
    od.move_to_end("a")
    assert codec().encode(od) == {"$dict": [["b", 2], ["a", 1]]}


def test_items_that_cannot_cross_become_handles():
    o = Obj()
    c = codec()
    data = c.encode([1, o, {"k": o}])
    assert data == [1, {"$ref": id(o)}, {"$dict": [["k", {"$ref": id(o)}]]}]
    with pytest.raises(wire.NotEncodable):
        c.encode([1, o], strict=True)


def test_encoding_copies_lists():
    c = codec()
    src = [1, 2, 3]
    data = c.encode(src)
    src.append(4)
    assert data == [1, 2, 3]


def test_too_deep_or_too_big_values_become_handles_or_fail_strictly():
    deep = []
    cur = deep
    for _ in range(100):
        nxt = []
        cur.append(nxt)
        cur = nxt
    c = codec()
    data = c.encode(deep)
    depth = 0
    while isinstance(data, list):
        data = data[0] if data else None
        depth += 1
    assert isinstance(data, dict) and "$ref" in data  # cut at the depth limit
    with pytest.raises(wire.NotEncodable):
        c.encode(deep, strict=True)
    cyclic = []
    cyclic.append(cyclic)
    assert c.encode(cyclic)  # no recursion error: ends in a handle


@pytest.mark.parametrize("data", [
    {"$nope": 1},
    {"$int": "12a"},
    {"$int": 5},
    {"$int": "1" * 5000},
    {"$float": "NaN"},
    {"$float": 1.0},
    {"$tuple": 5},
    {"$tuple": [1], "$list": [1]},
    {"$dict": [[1]]},
    {"$dict": [[[1], 2]]},  # unhashable key
    {"$set": [[1]]},
    {"$bytes": "not base64!"},
    {"$bytes": "QQ"},  # unpadded
    {"$bytes": 5},
    {"$complex": [1]},
    {"$complex": ["a", 1]},
    {"$slice": [1, 2]},
    {"$ellipsis": 1},
    {"a": 1},
    {},
    2 ** 63,
    -2 ** 63 - 1,
    {"$ref": 1},  # refused: this codec has no ref decoder below
])
def test_strict_decoding(data):
    c = wire.Codec()
    with pytest.raises(wire.ProtocolError):
        c.decode(data)


def test_non_finite_literals_and_overflowing_floats_are_refused():
    with pytest.raises(wire.ProtocolError):
        wire.loads(b'{"v": NaN}')
    with pytest.raises(wire.ProtocolError):
        wire.loads(b'{"v": Infinity}')
    big = wire.loads(b'{"v": 1e999}')["v"]  # JSON's parser makes inf of it: the codec refuses
    with pytest.raises(wire.ProtocolError):
        wire.Codec().decode(big)
    with pytest.raises(wire.ProtocolError):
        wire.Codec().decode([1.0, big])


def test_nesting_and_item_limits_on_decode():
    c = wire.Codec()
    v = 1
    for _ in range(wire.MAX_DEPTH + 1):
        v = [v]
    with pytest.raises(wire.ProtocolError):
        c.decode(v)
    v = 1
    for _ in range(wire.MAX_DEPTH - 1):
        v = [v]
    assert c.decode(v)
    with pytest.raises(wire.ProtocolError):
        c.decode([[0] * 1000] * (wire.MAX_ITEMS // 1000 + 1))


def test_callbacks_only_where_allowed():
    assert codec().decode({"$callback": 7}) == ("cb", 7)
    with pytest.raises(wire.ProtocolError):
        wire.Codec().decode({"$callback": 7})
    with pytest.raises(wire.ProtocolError):
        codec().decode({"$callback": "7"})


def test_strings_are_capped():
    c = wire.Codec()
    with pytest.raises(wire.ProtocolError):
        c.decode("x" * (wire.MAX_STR + 1))
    assert set(codec().encode("x" * (wire.MAX_STR + 1))) == {"$ref"}


def test_lone_surrogates_cannot_cross_as_text():
    data = codec().encode("a\ud800")
    with pytest.raises(UnicodeEncodeError):
        wire.pack({"v": data})


# ---- numpy ---------------------------------------------------------------------------------

def test_ndarray_round_trips():
    np = need_numpy()
    for dtype in ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                  "uint64", "float16", "float32", "float64", "complex64", "complex128"]:
        a = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
        back, data = roundtrip(a)
        assert data["$ndarray"]["dtype"] == dtype and data["$ndarray"]["shape"] == [3, 4]
        assert back.dtype == a.dtype and back.shape == a.shape and (back == a).all()
        back[0, 0] = 1  # writable
    a = np.arange(10, dtype=np.float64)[::3]  # not contiguous
    back, _ = roundtrip(a)
    assert (back == a).all()
    big_endian = np.arange(4, dtype=">i4")
    back, data = roundtrip(big_endian)
    assert data["$ndarray"]["dtype"] == "int32" and back.tolist() == [0, 1, 2, 3]
    back, _ = roundtrip(np.zeros((0, 3), dtype=np.float32))
    assert back.shape == (0, 3)
    nan = np.array([np.nan, np.inf], dtype=np.float32)
    back, _ = roundtrip(nan)
    assert np.isnan(back[0]) and np.isinf(back[1])


def test_object_arrays_and_scalars():
    np = need_numpy()
    a = np.array(["uuid-1", "uuid-2", None], dtype=object)
    back, data = roundtrip(a)
    assert data["$ndarray"]["dtype"] == "object" and back.dtype == object
    assert back.tolist() == ["uuid-1", "uuid-2", None]
    o = Obj()
    a = np.empty(2, dtype=object)
    a[0], a[1] = o, [1, 2]
    back, _ = roundtrip(a)
    assert back[0] is o and back[1] == [1, 2]
    for s in (np.int64(-5), np.float32(1.5), np.bool_(True), np.complex64(1 + 2j)):
        back, data = roundtrip(s)
        assert "$npscalar" in data and type(back) is type(s) and back == s


def test_ndarray_strictness():
    need_numpy()
    c = wire.Codec()
    good = {"dtype": "int32", "shape": [2], "data": "AQAAAAIAAAA="}
    assert c.decode({"$ndarray": good}).tolist() == [1, 2]
    for bad in [
        dict(good, dtype="float128"),
        dict(good, dtype="<U5"),
        dict(good, dtype="bfloat16"),
        dict(good, shape=[3]),  # data length does not match
        dict(good, shape=[-2]),
        dict(good, shape="2"),
        dict(good, data="AQAAAAIAAA"),
        dict(good, extra=1),
        {"dtype": "object", "shape": [2], "items": [1]},
        {"dtype": "object", "shape": [1], "data": "AA=="},
    ]:
        with pytest.raises(wire.ProtocolError):
            c.decode({"$ndarray": bad})
    with pytest.raises(wire.ProtocolError):
        c.decode({"$npscalar": {"dtype": "int64", "data": "AQAAAA=="}})  # 4 bytes, not 8


def test_unsupported_numpy_dtypes_become_handles():
    np = need_numpy()
    for a in (np.array(["a", "b"]), np.array([1], dtype="datetime64[s]"),
              np.zeros(2, dtype=[("x", "i4")])):
        assert set(codec().encode(a)) == {"$ref"}


def test_tensor_round_trips():
    torch = need_torch()
    need_numpy()
    for dtype in (torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.float16):
        t = torch.arange(6).reshape(2, 3).to(dtype)
        back, data = roundtrip(t)
        assert data["$tensor"]["device"] == "cpu"
        assert back.dtype == t.dtype and torch.equal(back, t)
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    back, _ = roundtrip(t)
    assert torch.equal(back, t)
    back, data = roundtrip(torch.float16)
    assert data == {"$torch_dtype": "float16"} and back is torch.float16
    back, data = roundtrip(torch.device("cpu"))
    assert data == {"$torch_device": "cpu"} and back == torch.device("cpu")


# ---- frames --------------------------------------------------------------------------------

def test_frames_over_a_socket():
    a, b = socket.socketpair()
    with a, b:
        reader = wire.FrameReader(b)
        a.sendall(wire.pack({"x": 1}) + wire.pack({"y": "é"}))
        assert reader.read() == {"x": 1}
        assert reader.read() == {"y": "é"}
        assert wire.pack({"a": 1}) == struct.pack(">I", 7) + b'{"a":1}'


@pytest.mark.parametrize("raw", [
    struct.pack(">I", 5) + b"[1,2]",  # not an object
    struct.pack(">I", 3) + b"\xff\xfe{",  # not UTF-8
    struct.pack(">I", 8) + b"{'a': 1}",  # not JSON
    struct.pack(">I", 10) + b'{"a":1}',  # truncated, then EOF
    b"\x00\x00",  # truncated header
])
def test_bad_frames(raw):
    a, b = socket.socketpair()
    with b:
        reader = wire.FrameReader(b)
        a.sendall(raw)
        a.close()
        with pytest.raises(wire.ProtocolError):
            reader.read()


def test_frame_caps():
    a, b = socket.socketpair()
    with a, b:
        reader = wire.FrameReader(b, max_frame=100)
        a.sendall(struct.pack(">I", 101))
        with pytest.raises(wire.ProtocolError):
            reader.read()
    with pytest.raises(wire.NotEncodable):
        wire.pack({"x": "y" * 200}, max_frame=100)
    a, b = socket.socketpair()
    with b:
        a.close()
        assert wire.FrameReader(b).read() is None  # a clean end between frames


def test_extra_types_encode_as_handles_at_any_depth():
    """The judge's handles are `extra_types`: nested in arguments (a list in a tuple) they
    must still come out as handles, even in strict mode for their container."""

    class Handle:
        pass

    h = Handle()
    c = wire.Codec(encode_object=lambda obj: {"$ref": 7}, extra_types=(Handle,))
    assert c.encode(h) == {"$ref": 7}
    assert c.encode([h]) == [{"$ref": 7}]
    assert c.encode((1, [h, {"k": h}])) == {
        "$tuple": [1, [{"$ref": 7}, {"$dict": [["k", {"$ref": 7}]]}]]
    }


# ---- hostile builtin subclasses (docs/probe-protocol.md, "The judge decides on data only") ----
#
# Written as a submission that has read the codec would write them: every method a subclass
# can override lies (and records that it ran), and so do the class's metaclass (equality with
# and hash of the builtin type, isinstance/issubclass, and its __mro__ / __dict__ attributes)
# and the instance's __class__.

CALLED = []


def _record(name, answer):
    def method(self, *args, **kwargs):
        CALLED.append(name)
        return answer(self) if callable(answer) else answer
    return method


class LyingMeta(type):
    def __eq__(cls, other):
        CALLED.append("meta.__eq__")
        return True

    def __hash__(cls):
        CALLED.append("meta.__hash__")
        return hash(list)

    def __instancecheck__(cls, obj):
        CALLED.append("meta.__instancecheck__")
        return True

    def __subclasscheck__(cls, sub):
        CALLED.append("meta.__subclasscheck__")
        return True

    def __getattribute__(cls, name):
        if name in ("__mro__", "__bases__", "__dict__", "_fields", "n_fields"):
            CALLED.append("meta." + name)
            return {"_fields": ("x",)} if name == "__dict__" else (list, object)
        return type.__getattribute__(cls, name)


# What every liar answers (whatever its base): the value the judge would be fooled by.
_LIES = {
    "__eq__": True, "__ne__": False, "__lt__": True, "__le__": True, "__gt__": True,
    "__ge__": True, "__hash__": 0, "__bool__": True, "__len__": 1,
    "__iter__": lambda s: iter(["lie"]), "__reversed__": lambda s: iter(["lie"]),
    "__contains__": True, "__getitem__": "lie", "__index__": 8, "__int__": 8,
    "__float__": 8.0, "__complex__": 8j, "__str__": "lie", "__repr__": "lie",
    "__bytes__": b"lie", "__format__": "lie", "__add__": "lie", "__radd__": "lie",
    "__reduce__": (str, ("lie",)), "__reduce_ex__": (str, ("lie",)),
    "__getnewargs__": ("lie",), "__copy__": "lie", "__deepcopy__": "lie",
    "copy": lambda s: ["lie"], "items": [("lie", 1)], "keys": ["lie"], "values": [1],
    "get": "lie", "tolist": ["lie"], "encode": b"lie", "decode": "lie",
}


def liar(base, extra=None):
    ns = {name: _record(name, answer) for name, answer in _LIES.items()}
    ns["__class__"] = property(lambda self: base)  # isinstance(x, base) is true anyway
    ns["real"] = property(lambda self: 8.0)
    ns["imag"] = property(lambda self: 8.0)

    def getattribute(self, name):
        if name not in ("__class__",):
            CALLED.append("__getattribute__ " + name)
        return object.__getattribute__(self, name)

    ns["__getattribute__"] = getattribute
    ns.update(extra or {})
    return LyingMeta("Lying" + base.__name__, (base,), ns)


LYING_CASES = [
    (int, 5, 5),
    (int, 2 ** 70, {"$int": str(2 ** 70)}),
    (float, 2.5, 2.5),
    (float, math.inf, {"$float": "inf"}),
    (complex, complex(1, -2), {"$complex": [1.0, -2.0]}),
    (str, "abc", "abc"),
    (bytes, b"ab\x00", {"$bytes": "YWIA"}),
    (list, [1, "b", [2]], [1, "b", [2]]),
    (tuple, (1, 2), {"$tuple": [1, 2]}),
    (dict, {"a": 1, 2: [3]}, {"$dict": [["a", 1], [2, [3]]]}),
    (set, {7}, {"$set": [7]}),
    (frozenset, {"z"}, {"$frozenset": ["z"]}),
    (collections.OrderedDict, {"b": 1, "a": 2}, {"$dict": [["b", 1], ["a", 2]]}),
    (collections.defaultdict, {"k": (1,)}, {"$dict": [["k", {"$tuple": [1]}]]}),
]


@pytest.mark.parametrize("base,value,wire_form", LYING_CASES,
                         ids=[c[0].__name__ for c in LYING_CASES])
def test_a_lying_builtin_subclass_crosses_as_its_base_value(base, value, wire_form):
    cls = liar(base)
    obj = cls(int) if base is collections.defaultdict else cls(value)
    if base is collections.defaultdict:
        obj.update(value)
    CALLED.clear()
    for strict in (False, True):
        for wrapped, form in ((obj, wire_form), ([obj, obj], [wire_form, wire_form]),
                              ({"k": obj}, {"$dict": [["k", wire_form]]})):
            assert codec().encode(wrapped, strict=strict) == form
    assert CALLED == [], "the codec ran the subclass's (or its metaclass's) own code"
    back, _ = roundtrip(obj)
    exact = dict if base in (collections.OrderedDict, collections.defaultdict) else base
    assert type(back) is exact and back == (dict(value) if exact is dict else value)


def test_a_lying_subclass_as_a_dict_key_or_set_item_crosses_by_value():
    keyed = {liar(str)("k"): 1}  # built (its keys hashed) by the subject's own code
    items = {liar(int)(3)}
    CALLED.clear()
    assert codec().encode(keyed) == {"$dict": [["k", 1]]}
    assert codec().encode(items) == {"$set": [3]}
    assert CALLED == []


class Impostor(metaclass=LyingMeta):
    """Not a builtin at all: pretends to be an int through __class__, its metaclass and every
    conversion an int has."""

    __class__ = property(lambda self: int)
    __eq__ = _record("__eq__", True)
    __hash__ = _record("__hash__", 0)
    __index__ = _record("__index__", 8)
    __int__ = _record("__int__", 8)
    __len__ = _record("__len__", 1)
    __iter__ = _record("__iter__", lambda s: iter([8]))


class HideBase(type):
    def mro(cls):
        return (cls, object)  # an int's layout, no int in the MRO


class HiddenInt(int, metaclass=HideBase):
    __eq__ = _record("__eq__", True)
    __hash__ = _record("__hash__", 0)


def test_impostors_and_hidden_bases_cross_as_handles_never_as_builtins():
    assert isinstance(Impostor(), int)  # what an isinstance check would have believed
    assert wire.dumps(HiddenInt(5)) == b"5"  # an int's layout, whatever its MRO says
    for obj in (Impostor(), HiddenInt(5)):
        CALLED.clear()
        c = codec()
        assert set(c.encode(obj)) == {"$ref"}
        assert set(c.encode([obj, 1])[0]) == {"$ref"}
        with pytest.raises(wire.NotEncodable):
            c.encode(obj, strict=True)
        assert CALLED == []


def test_records_come_back_as_handles_and_fetch_as_base_values():
    class Color(enum.IntEnum):
        RED = 3

    class Mode(str, enum.Enum):
        FAST = "fast"

    Point = collections.namedtuple("Point", "x y")

    class Point3(Point):
        pass

    c = codec()
    for obj, fetched in ((Color.RED, 3), (Mode.FAST, "fast"), (Point(1, 2), {"$tuple": [1, 2]}),
                         (Point3(1, 2), {"$tuple": [1, 2]})):
        assert set(c.encode(obj)) == {"$ref"}, obj
        assert c.encode(obj, strict=True) == fetched
    st = __import__("os").stat(".")  # a struct sequence (n_fields)
    assert set(c.encode(st)) == {"$ref"}
    assert c.encode(st, strict=True)["$tuple"][:1] == [st.st_mode]


def test_dicts_with_keys_that_cannot_cross_are_handles_on_the_subject_side():
    o = Obj()
    subject_side = wire.Codec(encode_object=lambda v: {"$ref": id(v)}, keys_by_value=True)
    d = {o: 1}
    assert subject_side.encode(d) == {"$ref": id(d)}
    assert subject_side.encode([d]) == [{"$ref": id(d)}]
    s = {(1, o)}
    assert subject_side.encode(s) == {"$ref": id(s)}
    assert subject_side.encode({1: o}) == {"$dict": [[1, {"$ref": id(o)}]]}  # values may
    with pytest.raises(wire.NotEncodable):
        subject_side.encode(d, strict=True)
    # and a judge that is sent one anyway (a patched server) refuses it: handles do not hash
    from infradev_probe import _core

    class FakeClient:
        generation = 1
        rank = None

    judge = wire.Codec(decode_ref=lambda tag: _core.Handle(FakeClient(), tag["$ref"], 1, {
        "kind": "object", "callable": False, "exception": False, "builtin": None}))
    for data in ({"$dict": [[{"$ref": 5}, 1]]}, {"$set": [{"$ref": 5}]},
                 {"$frozenset": [{"$tuple": [{"$ref": 5}]}]}):
        with pytest.raises(wire.ProtocolError):
            judge.decode(data)


def test_a_class_made_on_every_call_does_not_grow_the_cache():
    c = codec()
    for i in range(wire._CLASS_CACHE_MAX + 50):
        assert c.encode(type("L%d" % i, (list,), {})([i])) == [i]
    assert len(c._enc_table) <= wire._CLASS_CACHE_MAX


def test_numpy_subclasses_do_not_cross_by_value():
    np = need_numpy()

    class Lying(np.ndarray):
        def tobytes(self, *a, **k):
            CALLED.append("tobytes")
            return b"\x00" * 8

    class LyingScalar(np.float64):
        @property
        def dtype(self):
            CALLED.append("dtype")
            return np.dtype("int8")

    c = codec()
    CALLED.clear()
    arr = np.arange(3.0).view(Lying)
    assert set(c.encode(arr)) == {"$ref"}
    assert set(c.encode(LyingScalar(1.5))) == {"$ref"}
    with pytest.raises(wire.NotEncodable):
        c.encode(LyingScalar(1.5), strict=True)
    assert CALLED == []
    # numpy's own scalar types of every allowed dtype still cross, aliases included
    for t in (np.longlong, np.ulonglong, np.intc, np.int64, np.float64, np.bool_, np.float16):
        back, data = roundtrip(t(1))
        assert "$npscalar" in data and back == 1
    assert set(c.encode(np.str_("x"))) == {"$ref"}  # not a numeric dtype


def test_torch_sizes_are_tuples_and_tensor_subclasses_do_not_cross():
    torch = need_torch()
    c = codec()
    assert c.encode(torch.zeros(2, 3).shape) == {"$tuple": [2, 3]}
    p = torch.nn.Parameter(torch.ones(2))
    assert "$tensor" in c.encode(p)

    class Lying(torch.Tensor):
        def numpy(self, *a, **k):
            CALLED.append("numpy")
            return torch.Tensor.numpy(self) * 0

    CALLED.clear()
    t = torch.arange(3.0).as_subclass(Lying)
    assert set(c.encode(t)) == {"$ref"}
    with pytest.raises(wire.NotEncodable):
        c.encode(t, strict=True)
    assert CALLED == []

def json_depth(v):
    """How deep arrays and objects nest in a JSON-able value."""
    deepest = 0
    stack = [(v, 1)]
    while stack:
        x, d = stack.pop()
        if type(x) is list:
            deepest = max(deepest, d)
            stack.extend((y, d + 1) for y in x)
        elif type(x) is dict:
            deepest = max(deepest, d)
            stack.extend((y, d + 1) for y in x.values())
    return deepest


def test_the_deepest_legal_value_fits_every_frame():
    value = complex(1, float("inf"))
    for _ in range(wire.MAX_DEPTH):
        value = {"k": value}
    w = wire.Codec().encode(value)
    assert json_depth(w) == 3 * wire.MAX_DEPTH + 3
    with pytest.raises(wire.NotEncodable):
        wire.Codec().encode({"k": value})
    req = {"op": "call", "obj": {"$ref": 1}, "args": w, "kwargs": w}
    frames = [
        # judge -> broker
        {"op": "call", "id": 1, "req": req},
        {"op": "call", "id": 1, "rank": 0, "req": {"op": "batch", "reqs": [req]}},
        {"op": "call_ranks", "id": 1, "reqs": [req] * 4},
        {"id": 1, "callback_ok": w},
        # subject -> broker
        {"id": 1, "ok": w},
        {"id": 1, "ok": [{"ok": w}]},
        {"id": 1, "ok": {"params": [{"name": "a", "kind": "KEYWORD_ONLY", "default": w}]}},
        {"id": 1, "callback": {"cb": 1, "args": w, "kwargs": w}},
        # broker -> judge
        {"id": 1, "group": 1, "ranks": [{"ok": [{"ok": w}], "subject_ns": 1}] * 4},
    ]
    for frame in frames:
        assert json_depth(frame) <= wire.MAX_FRAME_DEPTH, frame.keys()
        assert wire.loads(wire.pack(frame)[4:]) == frame
