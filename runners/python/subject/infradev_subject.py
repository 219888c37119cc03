"""The subject's call server of the two-sandbox probe phase (docs/probe-protocol.md).

Run as ``python3 -I /infradev/subject/infradev_subject.py`` in the subject sandbox:

``INFRADEV_BROKER``
    Path of the broker's Unix socket (``/infradev/broker/subject.sock``).
``INFRADEV_REPO``
    The repository root (default ``/infradev/repo``), put at the front of ``sys.path`` (and made
    the working directory) only after the broker has welcomed us.
``INFRADEV_SUBJECT_STDERR``
    ``keep`` leaves file descriptor 2 alone (for debugging the server); by default 0, 1 and 2 are
    ``/dev/null``, so nothing the submission prints goes anywhere or can block.

The server connects, says hello before anything of the repository is importable, waits for the
welcome, then serves one request at a time: it imports modules, calls functions and methods,
and keeps a table of handles to the objects that do not cross by value. Errors are reported as
``{"builtin": <allow-listed builtin base or null>, "classes": [<handles>]}``: never a message,
a type name or a traceback. Everything here runs inside the submission's own process: what a
submission patches can only make its own answers wrong, but a failure in this server's own
encoding still comes back as an ``err`` reply, never as a broken frame.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
try:
    import infradev_wire as wire
finally:
    try:
        sys.path.remove(_HERE)
    except ValueError:
        pass

import builtins  # noqa: E402
import importlib  # noqa: E402
import inspect  # noqa: E402
import itertools  # noqa: E402
import operator  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402
import types  # noqa: E402

# Exception bases that may be reported (docs/probe-protocol.md, "Raised errors"), by class.
_ALLOWED_NAMES = (
    "AssertionError TypeError ValueError KeyError IndexError AttributeError NotImplementedError "
    "RuntimeError ImportError ModuleNotFoundError SyntaxError NameError ZeroDivisionError "
    "OverflowError RecursionError MemoryError OSError StopIteration LookupError ArithmeticError "
    "Exception"
).split()
_ALLOWED_LIST = tuple((getattr(builtins, n), n) for n in _ALLOWED_NAMES)
_BY_NAME = {n: c for c, n in _ALLOWED_LIST}

ITER_LIMIT = 1_000_000

# Bound at import, before the repository is importable.
_getattr = getattr
_setattr = setattr
_delattr = delattr
_type = type
_dict = dict
_list = list
_int = int
_str = str
_len = len
_id = id
_callable = callable
_isinstance = isinstance
_mro = type.__dict__["__mro__"].__get__
_is_subtype = type.__subclasscheck__  # _is_subtype(base, cls): the C-level MRO walk
_ModuleType = types.ModuleType
_MethodType = types.MethodType
_FunctionType = types.FunctionType
_BuiltinType = types.BuiltinFunctionType  # == BuiltinMethodType
_MethodWrapperType = types.MethodWrapperType
_signature = inspect.signature
_import_module = importlib.import_module
_islice = itertools.islice
_get_ident = threading.get_ident
_exit = os._exit
_pack = wire.pack

_BINOPS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
    "pow": operator.pow, "matmul": operator.matmul, "and": operator.and_, "or": operator.or_,
    "xor": operator.xor, "lshift": operator.lshift, "rshift": operator.rshift,
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "eq": operator.eq, "ne": operator.ne,
}
_UNOPS = {"neg": operator.neg, "pos": operator.pos, "abs": operator.abs,
          "invert": operator.invert}

# How a request's result crosses.
VALUE, KEEP, STRICT, RAW = 0, 1, 2, 3

_MISSING = object()


class _Stale(Exception):
    """A ``$ref`` that is not in the handle table."""


# Our own failures, reported as ``infradev.*`` in the ``builtin`` field (matched by identity).
_CODES = (
    (wire.ProtocolError, "infradev.ProtocolError"),
    (wire.NotEncodable, "infradev.NotEncodable"),
    (_Stale, "infradev.StaleHandle"),
)

_NO_KWARGS = {}


def _first_allowed(cls):
    try:
        for k in _mro(cls):
            for base, name in _ALLOWED_LIST:
                if k is base:  # identity: a metaclass's __eq__/__hash__ never runs
                    return name
    except Exception:
        pass
    return None


def describe(obj):
    """``{"kind", "callable", "exception", "builtin"}`` of an object, from its real type only."""
    t = _type(obj)
    exception = False
    builtin = None
    if _is_subtype(_ModuleType, t):
        kind = "module"
    elif _is_subtype(type, t):
        kind = "class"
        if _is_subtype(BaseException, obj):
            exception = True
            builtin = _first_allowed(obj)
    elif t is _FunctionType:
        kind = "function"
    elif t is _BuiltinType:
        owner = obj.__self__
        kind = "function" if owner is None or _is_subtype(_ModuleType, _type(owner)) else "method"
    elif t is _MethodType or t is _MethodWrapperType:
        kind = "method"
    else:
        kind = "object"
        if _is_subtype(BaseException, t):
            builtin = _first_allowed(t)
    return {"kind": kind, "callable": _callable(obj), "exception": exception, "builtin": builtin}


class _Callback:
    """A judge-side callable, as the submission sees it."""

    __slots__ = ("_server", "_cb", "__weakref__")

    def __init__(self, server, cb):
        self._server = server
        self._cb = cb

    def __call__(self, *args, **kwargs):
        return self._server.invoke_callback(self._cb, args, kwargs)

    def __repr__(self):
        return "<judge callback #%d>" % self._cb


class Server:
    def __init__(self, sock, reader):
        self.sock = sock
        self.reader = reader
        self._send = sock.sendall
        self._read = reader.read
        self.table = {}  # ref -> object
        self.refs = {}  # id(object) -> ref
        self.descs = {}  # ref -> describe()
        self.exc_classes = {}  # ref -> exception class the judge holds
        self.next_ref = 1
        self.stubs = {}
        self.serving = []  # ids of the requests being served (nested through callbacks)
        self.thread = _get_ident()
        self.codec = wire.Codec(
            encode_object=self._ref_wire,
            decode_ref=self._decode_ref,
            decode_callback=self._stub,
            tensor_device="strict",
            keys_by_value=True,
        )
        self._encode = self.codec.encode
        self._decode = self.codec.decode
        self.ops = {
            "import": self.op_import,
            "getattr": self.op_getattr,
            "setattr": self.op_setattr,
            "delattr": self.op_delattr,
            "call": self.op_call,
            "call_method": self.op_call_method,
            "getitem": self.op_getitem,
            "setitem": self.op_setitem,
            "delitem": self.op_delitem,
            "len": self.op_len,
            "bool": self.op_bool,
            "hash": self.op_hash,
            "iter": self.op_iter,
            "contains": self.op_contains,
            "binop": self.op_binop,
            "unop": self.op_unop,
            "isinstance": self.op_isinstance,
            "issubclass": self.op_issubclass,
            "fetch": self.op_fetch,
            "put": self.op_put,
            "signature": self.op_signature,
            "describe": self.op_describe,
            "dir": self.op_dir,
            "release": self.op_release,
            "batch": self.op_batch,
        }

    # ---- handles ----------------------------------------------------------------------------

    def ref_of(self, obj):
        key = _id(obj)
        ref = self.refs.get(key)
        if ref is not None and self.table.get(ref) is obj:
            return ref
        ref = self.next_ref
        self.next_ref = ref + 1
        desc = describe(obj)
        self.table[ref] = obj
        self.refs[key] = ref
        self.descs[ref] = desc
        if desc["exception"]:
            self.exc_classes[ref] = obj
        return ref

    def _ref_wire(self, obj):
        ref = self.ref_of(obj)
        return {"$ref": ref, "describe": self.descs[ref]}

    def _decode_ref(self, tag):
        if _len(tag) != 1:
            raise wire.ProtocolError("a $ref from the judge has one key")
        return self.deref(tag["$ref"])

    def deref(self, ref):
        if _type(ref) is not _int:
            raise wire.ProtocolError("bad $ref")
        obj = self.table.get(ref, _MISSING)
        if obj is _MISSING:
            raise _Stale()
        return obj

    def release(self, ref):
        obj = self.table.pop(ref, _MISSING)
        if obj is _MISSING:
            return
        key = _id(obj)
        if self.refs.get(key) == ref:
            del self.refs[key]
        self.descs.pop(ref, None)
        self.exc_classes.pop(ref, None)

    # ---- fields of a request ----------------------------------------------------------------

    def obj(self, req, key="obj"):
        v = req.get(key, _MISSING)
        if _type(v) is _dict and _len(v) == 1:
            ref = v.get("$ref", _MISSING)
            if ref is not _MISSING:
                return self.deref(ref)
        if v is _MISSING:
            raise wire.ProtocolError("missing field")
        return self._decode(v)

    def value(self, req, key):
        v = req.get(key, _MISSING)
        if v is _MISSING:
            raise wire.ProtocolError("missing field")
        return self._decode(v)

    def name(self, req):
        v = req.get("name")
        if _type(v) is not _str:
            raise wire.ProtocolError("bad name")
        return v

    def args(self, req):
        v = req.get("args", _MISSING)
        if v is _MISSING:
            return ()
        if _type(v) is not _list:
            raise wire.ProtocolError("bad args")
        return self._decode(v)

    def kwargs(self, req):
        v = req.get("kwargs", _MISSING)
        if v is _MISSING:
            return _NO_KWARGS
        if _type(v) is _dict and _len(v) == 1:
            pairs = v.get("$dict", _MISSING)
            if _type(pairs) is _list and not pairs:
                return _NO_KWARGS
        kw = self._decode(v)
        if _type(kw) is not _dict:
            raise wire.ProtocolError("bad kwargs")
        for k in kw:
            if _type(k) is not _str:
                raise wire.ProtocolError("bad kwargs")
        return kw

    # ---- operations -------------------------------------------------------------------------

    def op_import(self, req):
        name = req.get("module")
        if _type(name) is not _str or not name or name.startswith("."):
            raise wire.ProtocolError("bad module name")
        return _import_module(name), VALUE

    def op_getattr(self, req):
        return _getattr(self.obj(req), self.name(req)), VALUE

    def op_setattr(self, req):
        _setattr(self.obj(req), self.name(req), self.value(req, "value"))
        return None, RAW

    def op_delattr(self, req):
        _delattr(self.obj(req), self.name(req))
        return None, RAW

    def op_call(self, req):
        fn = self.obj(req)
        return fn(*self.args(req), **self.kwargs(req)), VALUE

    def op_call_method(self, req):
        fn = _getattr(self.obj(req), self.name(req))
        return fn(*self.args(req), **self.kwargs(req)), VALUE

    def op_getitem(self, req):
        return self.obj(req)[self.value(req, "key")], VALUE

    def op_setitem(self, req):
        obj = self.obj(req)
        obj[self.value(req, "key")] = self.value(req, "value")
        return None, RAW

    def op_delitem(self, req):
        obj = self.obj(req)
        del obj[self.value(req, "key")]
        return None, RAW

    def op_len(self, req):
        return _len(self.obj(req)), VALUE

    def op_bool(self, req):
        return bool(self.obj(req)), VALUE

    def op_hash(self, req):
        return hash(self.obj(req)), VALUE

    def op_iter(self, req):
        items = _list(_islice(iter(self.obj(req)), ITER_LIMIT + 1))
        if _len(items) > ITER_LIMIT:
            raise wire.NotEncodable("too many items")
        return items, VALUE

    def op_contains(self, req):
        return self.value(req, "item") in self.obj(req), VALUE

    def op_binop(self, req):
        fn = _BINOPS.get(req.get("binop"))
        if fn is None:
            raise wire.ProtocolError("bad binop")
        return fn(self.obj(req, "a"), self.obj(req, "b")), VALUE

    def op_unop(self, req):
        fn = _UNOPS.get(req.get("unop"))
        if fn is None:
            raise wire.ProtocolError("bad unop")
        return fn(self.obj(req, "a")), VALUE

    def _classes(self, req, key):
        v = req.get(key, _MISSING)
        if _type(v) is _list:
            return tuple(self.obj({"c": c}, "c") for c in v)
        return self.obj(req, key)

    def op_isinstance(self, req):
        return _isinstance(self.obj(req), self._classes(req, "cls")), VALUE

    def op_issubclass(self, req):
        return issubclass(self.obj(req, "cls"), self._classes(req, "base")), VALUE

    def op_fetch(self, req):
        return self.obj(req), STRICT

    def op_put(self, req):
        return self.value(req, "value"), KEEP

    def op_signature(self, req):
        sig = _signature(self.obj(req))
        params = []
        for p in sig.parameters.values():
            entry = {"name": _str(p.name), "kind": p.kind.name}
            if p.default is not p.empty:
                entry["default"] = self._encode(p.default)
            params.append(entry)
        return {"params": params}, RAW

    def op_describe(self, req):
        return describe(self.obj(req)), RAW

    def op_dir(self, req):
        return dir(self.obj(req)), VALUE

    def op_release(self, req):
        refs = req.get("refs")
        if _type(refs) is not _list:
            raise wire.ProtocolError("bad refs")
        for ref in refs:
            if _type(ref) is _int:
                self.release(ref)
        return None, RAW

    def op_batch(self, req):
        reqs = req.get("reqs")
        if _type(reqs) is not _list or _len(reqs) > wire.MAX_ITEMS:
            raise wire.ProtocolError("bad batch")
        out = []
        raw = []
        for sub in reqs:
            try:
                if _type(sub) is _dict and sub.get("op") == "batch":
                    raise wire.ProtocolError("nested batch")
                result, mode = self.run(sub)
                out.append({"ok": self.encode_result(result, mode)})
                raw.append((result, mode))
            except BaseException as e:  # noqa: B036 - the submission's, reported as a value
                out.append({"err": self.raised(e)})
                raw.append(None)
        return (out, raw), RAW

    # ---- serving ----------------------------------------------------------------------------

    def run(self, req):
        if _type(req) is not _dict:
            raise wire.ProtocolError("a request is an object")
        handler = self.ops.get(req.get("op"))
        if handler is None:
            raise wire.ProtocolError("unknown op")
        result, mode = handler(req)
        if mode == VALUE and req.get("keep") is True:
            mode = KEEP
        return result, mode

    def encode_result(self, result, mode):
        if mode == VALUE:
            return self._encode(result)
        if mode == RAW:
            return result
        if mode == KEEP:
            return self._ref_wire(result)
        return self._encode(result, strict=True)

    def raised(self, exc):
        """The RaisedError form of an exception: allow-listed builtin base, handles of the
        exception classes the judge holds that it is an instance of. Nothing else."""
        t = _type(exc)
        for cls, code in _CODES:
            if t is cls:
                return {"builtin": code, "classes": []}
        classes = []
        for ref, cls in _list(self.exc_classes.items()):
            try:
                if _is_subtype(cls, t):
                    classes.append(ref)
            except Exception:
                pass
        return {"builtin": _first_allowed(t), "classes": classes}

    def answer(self, rid, req):
        """The reply frame (bytes) for one request."""
        self.serving.append(rid)
        try:
            try:
                result, mode = self.run(req)
                if mode == RAW and _type(result) is tuple:  # a batch: (encoded, raw results)
                    return self._batch_frame(rid, *result)
                enc = self.encode_result(result, mode)
                try:
                    return _pack({"id": rid, "ok": enc})
                except (wire.NotEncodable, UnicodeEncodeError):
                    # Too big to cross (or a string UTF-8 cannot carry): a handle instead.
                    if mode != VALUE:
                        raise wire.NotEncodable("not encodable")
                    return _pack({"id": rid, "ok": self._ref_wire(result)})
            except BaseException as e:  # noqa: B036
                return self._err_frame(rid, e)
        finally:
            self.serving.pop()

    def _batch_frame(self, rid, out, raw):
        try:
            return _pack({"id": rid, "ok": out})
        except (wire.NotEncodable, UnicodeEncodeError):
            pass
        for i, entry in enumerate(raw):
            if entry is not None and entry[1] == VALUE:
                out[i] = {"ok": self._ref_wire(entry[0])}
        return _pack({"id": rid, "ok": out})

    def _err_frame(self, rid, exc):
        try:
            return _pack({"id": rid, "err": self.raised(exc)})
        except BaseException:  # noqa: B036
            return _pack({"id": rid, "err": {"builtin": None, "classes": []}})

    def send(self, frame):
        try:
            self._send(frame)
        except OSError:
            _exit(0)

    def serve(self):
        read = self._read
        while True:
            msg = read()
            if msg is None:
                return
            rid = msg.get("id")
            if _type(rid) is not _int or "req" not in msg:
                raise wire.ProtocolError("not a request")
            self.send(self.answer(rid, msg["req"]))

    # ---- callbacks --------------------------------------------------------------------------

    def _stub(self, cb):
        stub = self.stubs.get(cb)
        if stub is None:
            stub = self.stubs[cb] = _Callback(self, cb)
        return stub

    def invoke_callback(self, cb, args, kwargs):
        if _get_ident() != self.thread or not self.serving:
            raise RuntimeError("a judge callback can only be called while a request is served")
        rid = self.serving[-1]
        enc = self._encode
        # The argument list and the kwargs dict are values of their own, as the judge decodes
        # them: an argument is one level down, so the depth limit is the same both ways.
        payload = {"cb": cb, "args": enc(_list(args)), "kwargs": enc(_dict(kwargs))}
        self.send(_pack({"id": rid, "callback": payload}))
        while True:
            msg = self._read()
            if msg is None:
                _exit(0)
            if "req" in msg:  # the judge calls us from inside its callback
                nested = msg.get("id")
                if _type(nested) is not _int:
                    raise wire.ProtocolError("not a request")
                self.send(self.answer(nested, msg["req"]))
                continue
            if msg.get("id") != rid:
                raise wire.ProtocolError("a callback answer for another request")
            if "callback_ok" in msg:
                return self._decode(msg["callback_ok"])
            if "callback_err" in msg:
                raise self.judge_exception(msg["callback_err"])
            raise wire.ProtocolError("not a callback answer")

    def judge_exception(self, err):
        """An exception for a judge callback's RaisedError: an instance of the first named
        class that can be built without arguments, else of the builtin, else RuntimeError."""
        if _type(err) is not _dict:
            return wire.ProtocolError("bad callback_err")
        for ref in err.get("classes") or ():
            cls = self.table.get(ref) if _type(ref) is _int else None
            if cls is not None and _type(cls) is type and _is_subtype(BaseException, cls):
                try:
                    return cls()
                except Exception:
                    continue
        base = _BY_NAME.get(err.get("builtin"))
        if base is not None:
            return base()
        return RuntimeError()


def _protect_stdio():
    keep_stderr = os.environ.get("INFRADEV_SUBJECT_STDERR") == "keep"
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    if not keep_stderr:
        os.dup2(devnull, 2)
    if devnull > 2:
        os.close(devnull)


# The variables a rank's welcome may set (torch.distributed's env:// names).
_RANK_ENV = frozenset(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def main():
    path = os.environ.get("INFRADEV_BROKER")
    if not path:
        sys.stderr.write("infradev_subject: INFRADEV_BROKER is not set\n")
        return 2
    repo = os.environ.get("INFRADEV_REPO", "/infradev/repo")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    reader = wire.FrameReader(sock)
    sock.sendall(wire.pack({
        "op": "hello",
        "pid": os.getpid(),
        "python": "%d.%d.%d" % sys.version_info[:3],
    }))
    welcome = reader.read()
    if (welcome is None or welcome.get("op") != "welcome"
            or _type(welcome.get("generation")) is not _int):
        sys.stderr.write("infradev_subject: the broker sent no welcome\n")
        return 2
    # A rank of a group: where it stands (RANK, WORLD_SIZE, MASTER_ADDR, ...), set before
    # anything of the repository is imported.
    rank_env = welcome.get("env", {})
    if (_type(rank_env) is not dict or set(rank_env) - _RANK_ENV
            or any(_type(v) is not str for v in rank_env.values())):
        sys.stderr.write("infradev_subject: bad rank environment\n")
        return 2
    os.environ.update(rank_env)
    _protect_stdio()
    sys.dont_write_bytecode = True
    sys.path.insert(0, repo)
    try:
        os.chdir(repo)
    except OSError:
        pass
    server = Server(sock, reader)
    try:
        server.serve()
    except wire.ProtocolError:
        _exit(3)
    # The broker hung up: leave without running the submission's exit handlers.
    _exit(0)


if __name__ == "__main__":
    sys.exit(main())
