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


def test_dict_insertion_order_and_subclasses_keep_identity():
    back, data = roundtrip({"b": 1, "a": 2})
    assert list(back) == ["b", "a"] and data == {"$dict": [["b", 1], ["a", 2]]}

    class Color(enum.IntEnum):
        RED = 1

    Point = collections.namedtuple("Point", "x y")
    for v in (Color.RED, Point(1, 2), collections.OrderedDict(a=1), bytearray(b"x"), Obj()):
        assert set(codec().encode(v)) == {"$ref"}, v


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
