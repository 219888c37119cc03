"""Frames and values of the two-sandbox probe protocol (docs/probe-protocol.md).

Used by both sides: the subject server (``infradev_subject.py``) and the judge's library
(``infradev_probe``). Standard library only; numpy and torch are used when they are importable
(never imported just to encode: an object of theirs can only exist once they are imported).

Frames: a 4-byte big-endian length, then that many bytes of UTF-8 JSON holding one object.

Values: JSON scalars cross as themselves (integers within i64, finite floats, strings up to
16 MiB); everything else is a one-key object whose key is a ``$`` tag. Decoding is strict: an
unknown tag, a wrong type, a dtype outside the allow-list, data whose length does not match its
shape, nesting deeper than 64 or more than 10**7 items is a :class:`ProtocolError`. Nothing is
ever pickled or evaluated.

Types are decided from ``type(x)`` and its real MRO, never by ``isinstance`` (which a
``__class__`` property or a metaclass answers) nor by hashing the type (a metaclass's
``__eq__``/``__hash__``). A subclass of a builtin value type (``int``, ``float``, ``complex``,
``str``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set``, ``frozenset``) crosses as its base
type's own value, read through the base type's own slots (``int.__index__``, ``list.copy``,
``dict.items``... called unbound), so no method the subclass defines runs: a lying ``__eq__``,
``__len__``, ``__iter__`` or ``__hash__`` never reaches the other side, and the value is the
one the object holds. An enum member and a named tuple (``_fields``, or a struct sequence's
``n_fields``) keep their identity and attributes instead: they come back as handles, and as
their base value only when fetched (``strict``). Subclasses of numpy arrays and scalars and of
torch tensors do not cross by value (their bytes would be read through the subclass's own
methods). See docs/probe-protocol.md, "The judge decides on data only".
"""

import base64
import binascii
import collections
import enum
import json
import math
import re
import struct
import sys

__all__ = [
    "MAX_FRAME",
    "MAX_DEPTH",
    "MAX_FRAME_DEPTH",
    "MAX_ANSWER",
    "MAX_ITEMS",
    "MAX_STR",
    "DTYPES",
    "ProtocolError",
    "NotEncodable",
    "Codec",
    "FrameReader",
    "pack",
    "dumps",
    "loads",
]

MAX_FRAME = 64 * 1024 * 1024
MAX_DEPTH = 64
# The deepest JSON nesting of a frame, which the broker enforces both ways. A value within
# MAX_DEPTH takes at most 3 JSON levels per value level ({"$dict":[[k,v]]}) plus 3 for its
# innermost item: 195; the deepest envelope (a batch inside a rank call, a call_ranks answer)
# adds 6, so every frame built from legal values fits.
MAX_FRAME_DEPTH = 256
# The largest frame the broker sends the judge: a reply of MAX_FRAME plus the broker's fields.
MAX_ANSWER = MAX_FRAME + (1 << 16)
MAX_ITEMS = 10_000_000
MAX_STR = 16 * 1024 * 1024
# Decimal digits of an ``$int``: CPython's own default limit on int <-> str conversions.
MAX_INT_DIGITS = 4300

I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1

DTYPES = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 float32 float64 "
    "complex64 complex128 object".split()
)
# numpy cannot hold bfloat16 natively; torch tensors carry it as raw 2-byte patterns.
_NUMPY_DTYPES = DTYPES - {"bfloat16", "object"}

_HEADER = struct.Struct(">I")
_INT_RE = re.compile(r"-?[0-9]{1,%d}\Z" % MAX_INT_DIGITS)
_DEVICE_RE = re.compile(r"[a-z][a-z0-9_]{0,15}(:[0-9]{1,4})?\Z")
_B64_RE = re.compile(rb"[A-Za-z0-9+/]*={0,2}\Z")

# Bound once, at import: nothing patched later (by a submission, in the subject) reaches here.
_isfinite = math.isfinite
_b64encode = base64.b64encode
_b64decode = base64.b64decode
_type = type
_len = len
_set = set
_map = map
_min = min
_max = max
_all = all
_list = list
_tuple = tuple
_int = int
_str = str
_float = float
_dict = dict
_frozenset = frozenset
_NoneType = type(None)
_EllipsisType = type(Ellipsis)
_id = id
_mro = type.__dict__["__mro__"].__get__  # a type's real MRO (no metaclass attribute)
_type_dict = type.__dict__["__dict__"].__get__  # a type's own namespace, likewise
_Enum = enum.Enum
_OrderedDict = collections.OrderedDict

# A builtin subclass's value, read through its base type's own slots (unbound: the subclass's
# methods never run). Each returns an object of the exact base type.
_int_value = int.__index__  # an exact int (long_long copies a subclass's digits)
_float_value = float.__float__
_complex_real = complex.__dict__["real"].__get__
_complex_imag = complex.__dict__["imag"].__get__
_str_value = str.__str__  # an exact str copy
_str_len = str.__len__
_bytes_slice = bytes.__getitem__  # [:] of a subclass: an exact bytes copy
_bytes_len = bytes.__len__
_list_copy = list.copy
_list_len = list.__len__
_tuple_slice = tuple.__getitem__
_tuple_len = tuple.__len__
_dict_len = dict.__len__
_dict_items = dict.items  # a view over the dict's own table
_set_len = set.__len__
_set_iter = set.__iter__
_frozenset_len = frozenset.__len__
_frozenset_iter = frozenset.__iter__
_ALL = slice(None)

_odict_iter = collections.OrderedDict.__iter__  # its linked list of keys, in order
# Past this many classes met, new ones are classified on every use instead of remembered (a
# submission that makes classes on the fly does not grow the cache without bound).
_CLASS_CACHE_MAX = 4096


def _in(mro, cls):
    """Whether ``cls`` is in ``mro`` (identity: no metaclass __eq__ runs)."""
    for k in mro:
        if k is cls:
            return True
    return False


def _is_record(mro):
    """An enum (its members) or a named tuple (``_fields``; a struct sequence's ``n_fields``):
    a value whose identity and attributes matter, read in each class's own namespace."""
    for k in mro:
        if k is _Enum:
            return True
    for k in mro:
        if k is _tuple:
            break
        names = _type_dict(k)
        if "_fields" in names or "n_fields" in names:
            return True
    return False


class ProtocolError(Exception):
    """A frame or a value that does not follow the protocol."""


class NotEncodable(Exception):
    """A value that cannot cross by value (in strict mode)."""


# --------------------------------------------------------------------------------------------
# JSON and frames

_encoder = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False
)
_encode_json = _encoder.encode


def _no_constant(name):
    raise ProtocolError("non-finite float literal")


_decoder = json.JSONDecoder(parse_constant=_no_constant)
_decode_json = _decoder.decode
_scan_json = _decoder.scan_once


def dumps(obj):
    """The UTF-8 JSON bytes of ``obj`` (compact, strict: no NaN, no lone surrogates)."""
    return _encode_json(obj).encode("utf-8")


def pack(obj, max_frame=MAX_FRAME):
    """One frame (header + body) for ``obj``. Raises NotEncodable when it exceeds the cap and
    UnicodeEncodeError when a string in it holds a lone surrogate."""
    body = _encode_json(obj).encode("utf-8")
    if _len(body) > max_frame:
        raise NotEncodable("frame too large")
    return _HEADER.pack(_len(body)) + body


def pack_body(body, max_frame=MAX_FRAME):
    if _len(body) > max_frame:
        raise NotEncodable("frame too large")
    return _HEADER.pack(_len(body)) + body


def loads(body):
    """One frame body -> dict. ProtocolError for anything but one strict UTF-8 JSON object."""
    try:
        text = body.decode("utf-8")
        try:
            obj, end = _scan_json(text, 0)
        except StopIteration:
            end = -1
        if end != _len(text):
            obj = _decode_json(text)  # whitespace around the object, or an error
    except ProtocolError:
        raise
    except (ValueError, RecursionError, MemoryError):
        raise ProtocolError("a frame is not strict UTF-8 JSON") from None
    if _type(obj) is not _dict:
        raise ProtocolError("a frame is not a JSON object")
    return obj


class FrameReader:
    """Reads frames from a connected stream socket (buffered: one ``recv`` usually brings a
    whole small frame)."""

    def __init__(self, sock, max_frame=MAX_FRAME):
        self.max_frame = max_frame
        self._file = sock.makefile("rb", buffering=1 << 16)
        self._read = self._file.read

    def read(self):
        """The next frame as a dict; None when the peer closed the connection between frames.
        ProtocolError for a frame over the cap, a truncated frame, or bad JSON."""
        head = self._read(4)
        if not head:
            return None
        if _len(head) != 4:
            raise ProtocolError("connection closed inside a frame header")
        (n,) = _HEADER.unpack(head)
        if n > self.max_frame:
            raise ProtocolError("frame over the size limit")
        body = self._read(n)
        if _len(body) != n:
            raise ProtocolError("connection closed inside a frame")
        return loads(body)

    def close(self):
        try:
            self._file.close()
        except OSError:
            pass


# --------------------------------------------------------------------------------------------
# Optional numeric libraries


def _numpy(import_it):
    np = sys.modules.get("numpy")
    if np is None and import_it:
        try:
            import numpy as np  # noqa: F811
        except Exception:
            return None
    return np


def _torch(import_it):
    torch = sys.modules.get("torch")
    if torch is None and import_it:
        try:
            import torch  # noqa: F811
        except Exception:
            return None
    return torch


_TORCH_DTYPE_NAMES = (
    "bool uint8 int8 int16 int32 int64 uint16 uint32 uint64 float16 bfloat16 float32 float64 "
    "complex64 complex128".split()
)


def _torch_dtypes(torch):
    """{torch.dtype: name} for the allowed dtypes this torch build has."""
    table = {}
    for name in _TORCH_DTYPE_NAMES:
        dt = getattr(torch, name, None)
        if dt is not None and _type(dt) is torch.dtype:
            table[dt] = name
    return table


def _b64(data):
    return _b64encode(data).decode("ascii")


def _unb64(text):
    if _type(text) is not _str or _len(text) % 4:
        raise ProtocolError("bad base64")
    raw = text.encode("ascii", "strict") if text.isascii() else None
    if raw is None or not _B64_RE.match(raw):
        raise ProtocolError("bad base64")
    try:
        return _b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError("bad base64") from None


def _shape(shape):
    if _type(shape) is not _list or _len(shape) > MAX_DEPTH:
        raise ProtocolError("bad shape")
    n = 1
    for d in shape:
        if _type(d) is not _int or d < 0 or d > MAX_FRAME * 8:
            raise ProtocolError("bad shape")
        n *= d
    if n > MAX_FRAME * 8:
        raise ProtocolError("bad shape")
    return n


# --------------------------------------------------------------------------------------------
# The codec

class Codec:
    """Encodes Python values to JSON-able structures and back.

    ``encode_object(obj)`` is called for an object that cannot cross by value and returns its
    wire form (a ``$ref`` or ``$callback`` dict) or raises (TypeError on the judge). In strict
    mode (``fetch``), such an object raises NotEncodable instead. ``decode_ref(tagdict)`` and
    ``decode_callback(n)`` build the local objects for those tags; None refuses the tag.

    ``tensor_device``: ``"strict"`` moves a decoded tensor to its device (an error if that
    device is not usable); ``"available"`` keeps it on the CPU when its device is not usable.

    ``keys_by_value`` (the subject's codec): a dict whose keys, or a set whose items, cannot
    all cross by value crosses as a handle itself (non-strict; NotEncodable when strict): the
    other side would have to hash handles to rebuild it, and a handle has no hash of its own.
    """

    def __init__(self, encode_object=None, decode_ref=None, decode_callback=None,
                 tensor_device="strict", extra_types=None, keys_by_value=False):
        self.encode_object = encode_object
        self.decode_ref = decode_ref
        self.decode_callback = decode_callback
        self.tensor_device = tensor_device
        self.keys_by_value = keys_by_value
        self._torch_names = None
        self._torch_by_name = None
        self._np_scalar_types = None
        # id(type) -> (type, handler): looked up by identity, so that a metaclass's __hash__ or
        # __eq__ never runs here and no class passes for another (the type is kept alive).
        self._enc_table = {}
        for t, h in (
            (_list, self._enc_list),
            (_tuple, self._enc_tuple),
            (_dict, self._enc_dict),
            (_set, self._enc_set),
            (_frozenset, self._enc_frozenset),
            (bytes, self._enc_bytes),
            (complex, self._enc_complex),
            (slice, self._enc_slice),
            (_EllipsisType, self._enc_ellipsis),
        ):
            self._enc_table[_id(t)] = (t, h)
        # Types the caller handles itself (the judge's handles): straight to encode_object.
        for t in extra_types or ():
            self._enc_table[_id(t)] = (t, self._enc_object_d)
        # The first builtin value type in a subclass's MRO decides how it crosses (the C
        # OrderedDict before dict: its order is its own, not its dict table's).
        self._bases = (
            (_OrderedDict, self._enc_sub_odict),
            (_int, self._enc_sub_int),
            (_float, self._enc_sub_float),
            (complex, self._enc_sub_complex),
            (_str, self._enc_sub_str),
            (bytes, self._enc_sub_bytes),
            (_list, self._enc_sub_list),
            (_tuple, self._enc_sub_tuple),
            (_dict, self._enc_sub_dict),
            (_set, self._enc_sub_set),
            (_frozenset, self._enc_sub_frozenset),
        )
        self._dec_tags = {
            "$int": self._dec_int,
            "$float": self._dec_float,
            "$list": self._dec_list_tag,
            "$tuple": self._dec_tuple,
            "$set": self._dec_set,
            "$frozenset": self._dec_frozenset,
            "$dict": self._dec_dict,
            "$bytes": self._dec_bytes,
            "$complex": self._dec_complex,
            "$slice": self._dec_slice,
            "$ellipsis": self._dec_ellipsis,
            "$ndarray": self._dec_ndarray,
            "$npscalar": self._dec_npscalar,
            "$tensor": self._dec_tensor,
            "$torch_dtype": self._dec_torch_dtype,
            "$torch_device": self._dec_torch_device,
            "$callback": self._dec_callback,
        }

    # ---- encoding ---------------------------------------------------------------------------

    def encode(self, value, strict=False):
        """The wire form of ``value``. Non-strict: what cannot cross becomes a handle (via
        ``encode_object``). Strict: NotEncodable."""
        return self._enc(value, 0, strict, [MAX_ITEMS])

    def _enc(self, v, depth, strict, budget):
        t = _type(v)
        if t is _int:
            if I64_MIN <= v <= I64_MAX:
                return v
            return self._enc_bigint(v, strict)
        if t is _str:
            if _len(v) <= MAX_STR:
                return v
            return self._enc_object(v, strict)
        if t is _float:
            if _isfinite(v):
                return v
            return {"$float": "nan" if v != v else ("inf" if v > 0 else "-inf")}
        if v is None or t is bool:
            return v
        e = self._enc_table.get(_id(t))
        h = e[1] if e is not None and e[0] is t else self._classify(t)
        return h(v, depth, strict, budget)

    def _classify(self, t):
        """Dispatch for a type met for the first time, remembered by identity."""
        h = self._classify_new(t)
        if _len(self._enc_table) < _CLASS_CACHE_MAX:
            self._enc_table[_id(t)] = (t, h)
        return h

    def _numpy_scalars(self, np):
        """{id(type): type} of numpy's own scalar types of the allowed dtypes."""
        table = self._np_scalar_types
        if table is None:
            table = {}
            for code in np.typecodes["All"]:
                try:
                    dt = np.dtype(code)
                except Exception:
                    continue
                if dt.name in _NUMPY_DTYPES:
                    table[_id(dt.type)] = dt.type
            self._np_scalar_types = table
        return table

    def _classify_new(self, t):
        """numpy / torch types, a builtin value type's subclass, or an object."""
        try:
            mro = _mro(t)
        except TypeError:
            return self._enc_object_d
        np = _numpy(False)
        if np is not None:
            if t is np.ndarray:
                return self._enc_ndarray
            if self._numpy_scalars(np).get(_id(t)) is t:
                return self._enc_npscalar
            if _in(mro, np.generic) or _in(mro, np.ndarray):
                # numpy's other scalars (str_, datetime64...) and every subclass: their bytes
                # would be read through the subclass's own methods.
                return self._enc_object_d
        torch = _torch(False)
        if torch is not None:
            param = getattr(getattr(torch, "nn", None), "Parameter", None)
            if t is torch.Tensor or (param is not None and t is param):
                return self._enc_tensor
            if t is torch.dtype:
                return self._enc_torch_dtype
            if t is torch.device:
                return self._enc_torch_device
            if _in(mro, torch.Tensor):
                return self._enc_object_d  # a tensor subclass: read through its own methods
        for k in mro:
            for base, h in self._bases:
                if k is base:
                    return self._enc_record(h) if _is_record(mro) else self._enc_guarded(h)
        return self._enc_object_d

    # ---- builtin subclasses ---------------------------------------------------------------

    def _enc_guarded(self, h):
        """``h`` reading a subclass's value, or a handle when its slots refuse (a type whose
        MRO was rewritten after it was classified)."""
        def enc(v, depth, strict, budget):
            try:
                return h(v, depth, strict, budget)
            except NotEncodable:
                raise
            except Exception:
                return self._enc_object(v, strict)
        return enc

    def _enc_record(self, h):
        """An enum member or a named tuple: a handle (its identity and attributes are the
        point), its base value only when fetched."""
        guarded = self._enc_guarded(h)

        def enc(v, depth, strict, budget):
            if not strict:
                return self._enc_object(v, strict)
            return guarded(v, depth, strict, budget)
        return enc

    def _enc_sub_int(self, v, depth, strict, budget):
        i = _int_value(v)
        if I64_MIN <= i <= I64_MAX:
            return i
        try:
            return {"$int": _str(i)}
        except ValueError:  # more digits than int -> str allows
            return self._enc_object(v, strict)

    def _enc_sub_float(self, v, depth, strict, budget):
        return self._enc(_float_value(v), depth, strict, budget)

    def _enc_sub_complex(self, v, depth, strict, budget):
        return {"$complex": [self._enc(_complex_real(v), depth + 1, strict, budget),
                             self._enc(_complex_imag(v), depth + 1, strict, budget)]}

    def _enc_sub_str(self, v, depth, strict, budget):
        if _str_len(v) > MAX_STR:
            return self._enc_object(v, strict)
        return _str_value(v)

    def _enc_sub_bytes(self, v, depth, strict, budget):
        if _bytes_len(v) > MAX_FRAME:
            return self._enc_object(v, strict)
        return {"$bytes": _b64(_bytes_slice(v, _ALL))}

    def _enc_sub_list(self, v, depth, strict, budget):
        if not self._enter(v, _list_len(v), depth, strict, budget):
            return self._enc_object(v, strict)
        return self._enc_items(_list_copy(v), depth, strict, budget)

    def _enc_sub_tuple(self, v, depth, strict, budget):
        if not self._enter(v, _tuple_len(v), depth, strict, budget):
            return self._enc_object(v, strict)
        return {"$tuple": self._enc_items(_tuple_slice(v, _ALL), depth, strict, budget)}

    def _enc_sub_set(self, v, depth, strict, budget):
        if not self._enter(v, _set_len(v), depth, strict, budget):
            return self._enc_object(v, strict)
        return self._enc_members("$set", v, _list(_set_iter(v)), depth, strict, budget)

    def _enc_sub_frozenset(self, v, depth, strict, budget):
        if not self._enter(v, _frozenset_len(v), depth, strict, budget):
            return self._enc_object(v, strict)
        return self._enc_members("$frozenset", v, _list(_frozenset_iter(v)), depth, strict,
                                 budget)

    def _enc_sub_dict(self, v, depth, strict, budget):
        if not self._enter(v, 2 * _dict_len(v), depth, strict, budget):
            return self._enc_object(v, strict)
        return self._enc_pairs(v, _list(_dict_items(v)), depth, strict, budget)

    def _enc_sub_odict(self, v, depth, strict, budget):
        if not self._enter(v, 2 * _dict_len(v), depth, strict, budget):
            return self._enc_object(v, strict)
        # The linked list's order (OrderedDict.__iter__ of the C type), each key's value from
        # the dict's own table, matched by identity: no key is hashed or compared.
        values = {_id(k): (k, x) for k, x in _list(_dict_items(v))}
        pairs = []
        for k in _list(_odict_iter(v)):
            e = values.get(_id(k))
            if e is None or e[0] is not k:
                return self._enc_object(v, strict)
            pairs.append(e)
        return self._enc_pairs(v, pairs, depth, strict, budget)

    def _enc_object_d(self, v, depth, strict, budget):
        return self._enc_object(v, strict)

    def _enc_object(self, v, strict, *_):
        if strict or self.encode_object is None:
            raise NotEncodable("not encodable")
        return self.encode_object(v)

    def _enc_bigint(self, v, strict):
        try:
            text = _str(v)
        except ValueError:  # more digits than int -> str allows
            return self._enc_object(v, strict)
        return {"$int": text}

    def _enter(self, v, n, depth, strict, budget):
        """Counts ``n`` items; False when the value is too big or too deep to cross."""
        budget[0] -= n
        return depth < MAX_DEPTH and budget[0] >= 0

    def _enc_items(self, v, depth, strict, budget):
        """A fresh JSON list of the encoded items of ``v``, an exact list or tuple."""
        n = _len(v)
        if n == 0:
            return []
        # Types compared by identity (their ids): a metaclass's __hash__ never runs.
        if _len(_set(_map(_id, _map(_type, v)))) == 1:
            t = _type(v[0])
            if t is _int:
                if _min(v) >= I64_MIN and _max(v) <= I64_MAX:
                    return _list(v)
            elif t is _float:
                if _all(_map(_isfinite, v)):
                    return _list(v)
            elif t is _str:
                if _max(_map(_len, v)) <= MAX_STR:
                    return _list(v)
            elif t is bool or t is _NoneType:
                return _list(v)
        enc = self._enc
        d = depth + 1
        return [enc(x, d, strict, budget) for x in v]

    def _enc_list(self, v, depth, strict, budget):
        if not self._enter(v, _len(v), depth, strict, budget):
            return self._enc_object(v, strict)
        return self._enc_items(v, depth, strict, budget)

    def _enc_tuple(self, v, depth, strict, budget):
        if not self._enter(v, _len(v), depth, strict, budget):
            return self._enc_object(v, strict)
        return {"$tuple": self._enc_items(v, depth, strict, budget)}

    def _enc_set(self, v, depth, strict, budget):
        if not self._enter(v, _len(v), depth, strict, budget):
            return self._enc_object(v, strict)
        return self._enc_members("$set", v, _list(v), depth, strict, budget)

    def _enc_frozenset(self, v, depth, strict, budget):
        if not self._enter(v, _len(v), depth, strict, budget):
            return self._enc_object(v, strict)
        return self._enc_members("$frozenset", v, _list(v), depth, strict, budget)

    def _enc_dict(self, v, depth, strict, budget):
        if not self._enter(v, 2 * _len(v), depth, strict, budget):
            return self._enc_object(v, strict)
        return self._enc_pairs(v, _list(_dict_items(v)), depth, strict, budget)

    def _enc_members(self, tag, v, items, depth, strict, budget):
        """A set's items (``items``, an exact list); with keys_by_value, the whole set ``v`` as
        a handle when one of them cannot cross by value."""
        try:
            return {tag: self._enc_items(items, depth, strict or self.keys_by_value, budget)}
        except NotEncodable:
            if strict:
                raise
            return self._enc_object(v, strict)

    def _enc_pairs(self, v, pairs, depth, strict, budget):
        """A dict's (key, value) pairs; with keys_by_value, the whole dict ``v`` as a handle
        when one of its keys cannot cross by value."""
        enc = self._enc
        d = depth + 1
        key_strict = strict or self.keys_by_value
        try:
            return {"$dict": [[enc(k, d, key_strict, budget), enc(x, d, strict, budget)]
                              for k, x in pairs]}
        except NotEncodable:
            if strict:
                raise
            return self._enc_object(v, strict)

    def _enc_bytes(self, v, depth, strict, budget):
        if _len(v) > MAX_FRAME:
            return self._enc_object(v, strict)
        return {"$bytes": _b64(v)}

    def _enc_complex(self, v, depth, strict, budget):
        return {"$complex": [self._enc(v.real, depth + 1, strict, budget),
                             self._enc(v.imag, depth + 1, strict, budget)]}

    def _enc_slice(self, v, depth, strict, budget):
        if not self._enter(v, 3, depth, strict, budget):
            return self._enc_object(v, strict)
        enc = self._enc
        d = depth + 1
        return {"$slice": [enc(v.start, d, strict, budget), enc(v.stop, d, strict, budget),
                           enc(v.step, d, strict, budget)]}

    def _enc_ellipsis(self, v, depth, strict, budget):
        return {"$ellipsis": True}

    def _enc_ndarray(self, v, depth, strict, budget):
        try:
            dt = v.dtype
            name = dt.name
            if dt.kind == "O" and dt.fields is None and dt.shape == ():
                n = v.size
                if not self._enter(v, n, depth, strict, budget):
                    return self._enc_object(v, strict)
                flat = v.reshape(-1)
                items = [flat[i] for i in range(n)]
                return {"$ndarray": {"dtype": "object", "shape": _list(v.shape),
                                     "items": self._enc_items(items, depth, strict, budget)}}
            if name not in _NUMPY_DTYPES or dt.fields is not None or dt.shape != ():
                return self._enc_object(v, strict)
            if dt.byteorder == ">":
                v = v.astype(dt.newbyteorder("<"))
            if v.nbytes > MAX_FRAME:
                return self._enc_object(v, strict)
            return {"$ndarray": {"dtype": name, "shape": _list(v.shape),
                                 "data": _b64(v.tobytes(order="C"))}}
        except NotEncodable:
            raise
        except Exception:
            return self._enc_object(v, strict)

    def _enc_npscalar(self, v, depth, strict, budget):
        try:
            dt = v.dtype
            name = dt.name
            if name not in _NUMPY_DTYPES or dt.fields is not None:
                return self._enc_object(v, strict)
            np = _numpy(False)
            arr = np.asarray(v)
            if dt.byteorder == ">":
                arr = arr.astype(dt.newbyteorder("<"))
            return {"$npscalar": {"dtype": name, "data": _b64(arr.tobytes())}}
        except NotEncodable:
            raise
        except Exception:
            return self._enc_object(v, strict)

    def _torch_tables(self, torch):
        if self._torch_names is None:
            self._torch_names = _torch_dtypes(torch)
            self._torch_by_name = {n: d for d, n in self._torch_names.items()}
        return self._torch_names, self._torch_by_name

    def _enc_tensor(self, v, depth, strict, budget):
        torch = _torch(False)
        try:
            names, _ = self._torch_tables(torch)
            name = names.get(v.dtype)
            if name is None or v.layout is not torch.strided or v.is_meta:
                return self._enc_object(v, strict)
            if v.element_size() * v.numel() > MAX_FRAME:
                return self._enc_object(v, strict)
            device = _str(v.device)
            x = v.detach()
            if x.device.type != "cpu":
                x = x.cpu()
            if x.is_complex():
                x = x.resolve_conj()
            x = x.resolve_neg().contiguous()
            if name == "bfloat16":
                x = x.view(torch.int16)
            elif name in ("uint16", "uint32", "uint64"):
                x = x.view({"uint16": torch.int16, "uint32": torch.int32,
                            "uint64": torch.int64}[name])
            data = x.numpy().tobytes()
            return {"$tensor": {"dtype": name, "shape": _list(v.shape), "data": _b64(data),
                                "device": device}}
        except NotEncodable:
            raise
        except Exception:
            return self._enc_object(v, strict)

    def _enc_torch_dtype(self, v, depth, strict, budget):
        names, _ = self._torch_tables(_torch(False))
        name = names.get(v)
        if name is None:
            return self._enc_object(v, strict)
        return {"$torch_dtype": name}

    def _enc_torch_device(self, v, depth, strict, budget):
        text = _str(v)
        if not _DEVICE_RE.match(text):
            return self._enc_object(v, strict)
        return {"$torch_device": text}

    # ---- decoding ---------------------------------------------------------------------------

    def decode(self, data):
        """The local value of the wire form ``data``; ProtocolError when it is malformed."""
        try:
            return self._dec(data, 0, [MAX_ITEMS])
        except ProtocolError:
            raise
        except RecursionError:
            raise ProtocolError("value nested too deeply") from None

    def _dec(self, v, depth, budget):
        t = _type(v)
        if t is _int:
            if I64_MIN <= v <= I64_MAX:
                return v
            raise ProtocolError("integer outside i64 without $int")
        if t is _str:
            if _len(v) <= MAX_STR:
                return v
            raise ProtocolError("string too long")
        if t is _float:
            if _isfinite(v):
                return v
            raise ProtocolError("non-finite float without $float")
        if v is None or t is bool:
            return v
        if t is _list:
            return self._dec_items(v, depth, budget)
        if t is _dict:
            if _len(v) == 1:
                for tag in v:
                    pass
                h = self._dec_tags.get(tag)
                if h is not None:
                    return h(v[tag], depth, budget)
            if "$ref" in v:
                if self.decode_ref is None:
                    raise ProtocolError("unexpected $ref")
                return self.decode_ref(v)
            raise ProtocolError("unknown tag")
        raise ProtocolError("unexpected JSON type")

    def _dec_items(self, v, depth, budget):
        if _type(v) is not _list:
            raise ProtocolError("expected a list")
        n = _len(v)
        budget[0] -= n
        if budget[0] < 0:
            raise ProtocolError("too many items")
        if depth >= MAX_DEPTH:
            raise ProtocolError("value nested too deeply")
        if n == 0:
            return []
        ts = _set(_map(_type, v))
        if _len(ts) == 1:
            (t,) = ts
            if t is _int:
                if _min(v) >= I64_MIN and _max(v) <= I64_MAX:
                    return v
                raise ProtocolError("integer outside i64 without $int")
            if t is _float:
                if _all(_map(_isfinite, v)):
                    return v
                raise ProtocolError("non-finite float without $float")
            if t is _str:
                if _max(_map(_len, v)) <= MAX_STR:
                    return v
                raise ProtocolError("string too long")
            if t is bool or t is _NoneType:
                return v
        dec = self._dec
        d = depth + 1
        return [dec(x, d, budget) for x in v]

    def _dec_int(self, p, depth, budget):
        if _type(p) is not _str or not _INT_RE.match(p):
            raise ProtocolError("bad $int")
        try:
            return _int(p)
        except ValueError:
            raise ProtocolError("bad $int") from None

    def _dec_float(self, p, depth, budget):
        if p == "nan" and _type(p) is _str:
            return _float("nan")
        if p == "inf" and _type(p) is _str:
            return _float("inf")
        if p == "-inf" and _type(p) is _str:
            return _float("-inf")
        raise ProtocolError("bad $float")

    def _dec_list_tag(self, p, depth, budget):
        return _list(self._dec_items(p, depth, budget))

    def _dec_tuple(self, p, depth, budget):
        return _tuple(self._dec_items(p, depth, budget))

    def _dec_set(self, p, depth, budget):
        items = self._dec_items(p, depth, budget)
        try:
            return _set(items)
        except TypeError:
            raise ProtocolError("unhashable set item") from None

    def _dec_frozenset(self, p, depth, budget):
        items = self._dec_items(p, depth, budget)
        try:
            return _frozenset(items)
        except TypeError:
            raise ProtocolError("unhashable set item") from None

    def _dec_dict(self, p, depth, budget):
        if _type(p) is not _list:
            raise ProtocolError("bad $dict")
        budget[0] -= 2 * _len(p)
        if budget[0] < 0:
            raise ProtocolError("too many items")
        if depth >= MAX_DEPTH:
            raise ProtocolError("value nested too deeply")
        out = {}
        dec = self._dec
        d = depth + 1
        for pair in p:
            if _type(pair) is not _list or _len(pair) != 2:
                raise ProtocolError("bad $dict pair")
            k = dec(pair[0], d, budget)
            try:
                out[k] = dec(pair[1], d, budget)
            except TypeError:
                raise ProtocolError("unhashable dict key") from None
        return out

    def _dec_bytes(self, p, depth, budget):
        return _unb64(p)

    def _dec_complex(self, p, depth, budget):
        if _type(p) is not _list or _len(p) != 2:
            raise ProtocolError("bad $complex")
        parts = []
        for x in p:
            if _type(x) is _float or _type(x) is _int:
                x = self._dec(x, depth + 1, budget)
            elif _type(x) is _dict and _len(x) == 1 and "$float" in x:
                x = self._dec_float(x["$float"], depth, budget)
            else:
                raise ProtocolError("bad $complex")
            parts.append(_float(x))
        return complex(parts[0], parts[1])

    def _dec_slice(self, p, depth, budget):
        if _type(p) is not _list or _len(p) != 3:
            raise ProtocolError("bad $slice")
        a, b, c = self._dec_items(p, depth, budget)
        return slice(a, b, c)

    def _dec_ellipsis(self, p, depth, budget):
        if p is not True:
            raise ProtocolError("bad $ellipsis")
        return Ellipsis

    def _dec_ndarray(self, p, depth, budget):
        if _type(p) is not _dict:
            raise ProtocolError("bad $ndarray")
        np = _numpy(True)
        if np is None:
            raise ProtocolError("$ndarray without numpy")
        dtype = p.get("dtype")
        if _type(dtype) is not _str or dtype not in DTYPES or dtype == "bfloat16":
            raise ProtocolError("dtype not allowed")
        n = _shape(p.get("shape"))
        shape = _tuple(p["shape"])
        if dtype == "object":
            if _set(p) != {"dtype", "shape", "items"}:
                raise ProtocolError("bad $ndarray")
            items = self._dec_items(p["items"], depth, budget)
            if _len(items) != n:
                raise ProtocolError("$ndarray items do not match the shape")
            arr = np.empty(n, dtype=object)
            for i, x in enumerate(items):
                arr[i] = x
            return arr.reshape(shape)
        if _set(p) != {"dtype", "shape", "data"}:
            raise ProtocolError("bad $ndarray")
        dt = np.dtype(dtype).newbyteorder("<")
        data = _unb64(p["data"])
        if _len(data) != n * dt.itemsize:
            raise ProtocolError("$ndarray data does not match the shape")
        arr = np.frombuffer(bytearray(data), dtype=dt).reshape(shape)
        if not dt.isnative:
            arr = arr.astype(dt.newbyteorder("="))
        return arr

    def _dec_npscalar(self, p, depth, budget):
        if _type(p) is not _dict or _set(p) != {"dtype", "data"}:
            raise ProtocolError("bad $npscalar")
        np = _numpy(True)
        if np is None:
            raise ProtocolError("$npscalar without numpy")
        dtype = p["dtype"]
        if _type(dtype) is not _str or dtype not in _NUMPY_DTYPES:
            raise ProtocolError("dtype not allowed")
        dt = np.dtype(dtype).newbyteorder("<")
        data = _unb64(p["data"])
        if _len(data) != dt.itemsize:
            raise ProtocolError("$npscalar data does not match its dtype")
        value = np.frombuffer(data, dtype=dt)
        if not dt.isnative:
            value = value.astype(dt.newbyteorder("="))
        return value[0]

    def _dec_tensor(self, p, depth, budget):
        if _type(p) is not _dict or _set(p) != {"dtype", "shape", "data", "device"}:
            raise ProtocolError("bad $tensor")
        torch = _torch(True)
        np = _numpy(True)
        if torch is None or np is None:
            raise ProtocolError("$tensor without torch and numpy")
        _, by_name = self._torch_tables(torch)
        name = p["dtype"]
        if _type(name) is not _str or name not in by_name:
            raise ProtocolError("dtype not allowed")
        device = p["device"]
        if _type(device) is not _str or not _DEVICE_RE.match(device):
            raise ProtocolError("bad device")
        n = _shape(p["shape"])
        shape = _tuple(p["shape"])
        raw_name = {"bfloat16": "int16", "uint16": "int16", "uint32": "int32",
                    "uint64": "int64"}.get(name, name)
        dt = np.dtype(raw_name).newbyteorder("<")
        data = _unb64(p["data"])
        if _len(data) != n * dt.itemsize:
            raise ProtocolError("$tensor data does not match the shape")
        arr = np.frombuffer(bytearray(data), dtype=dt)
        if not dt.isnative:
            arr = arr.astype(dt.newbyteorder("="))
        t = torch.from_numpy(arr)
        if raw_name != name:
            t = t.view(by_name[name])
        t = t.reshape(shape)
        if device != "cpu":
            if self.tensor_device == "strict":
                t = t.to(device)
            else:
                try:
                    t = t.to(device)
                except Exception:
                    pass
        return t

    def _dec_torch_dtype(self, p, depth, budget):
        torch = _torch(True)
        if torch is None:
            raise ProtocolError("$torch_dtype without torch")
        _, by_name = self._torch_tables(torch)
        if _type(p) is not _str or p not in by_name:
            raise ProtocolError("dtype not allowed")
        return by_name[p]

    def _dec_torch_device(self, p, depth, budget):
        torch = _torch(True)
        if torch is None:
            raise ProtocolError("$torch_device without torch")
        if _type(p) is not _str or not _DEVICE_RE.match(p):
            raise ProtocolError("bad device")
        try:
            return torch.device(p)
        except Exception:
            raise ProtocolError("bad device") from None

    def _dec_callback(self, p, depth, budget):
        if self.decode_callback is None:
            raise ProtocolError("unexpected $callback")
        if _type(p) is not _int or p < 0 or p > I64_MAX:
            raise ProtocolError("bad $callback")
        return self.decode_callback(p)
