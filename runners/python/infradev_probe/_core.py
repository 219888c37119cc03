"""The judge's connection to the broker, and the proxies that stand for subject objects.

One connection per judge process (``INFRADEV_BROKER``), shared by the pytest plugin (lifecycle
events) and the library (calls). Calls are synchronous: one request, then frames until its
reply, serving the subject's callbacks meanwhile (a callback may call the subject again).
"""

import builtins
import inspect
import os
import socket
import weakref

from ._errors import (
    HandleOperatorError,
    NotEncodable,
    ProtocolError,
    RemoteException,
    StaleHandle,
    SubjectCrashed,
    SubjectError,
    SubjectFault,
    SubjectOutOfMemory,
    SubjectTimeout,
    TimeBudgetExceeded,
)
from ._wire import wire

# The builtin bases the subject may name in a RaisedError.
_REMOTE_BUILTINS = {
    name: getattr(builtins, name)
    for name in (
        "AssertionError TypeError ValueError KeyError IndexError AttributeError "
        "NotImplementedError RuntimeError ImportError ModuleNotFoundError SyntaxError NameError "
        "ZeroDivisionError OverflowError RecursionError MemoryError OSError StopIteration "
        "LookupError ArithmeticError Exception"
    ).split()
}
_LOCAL_BUILTINS = {cls: name for name, cls in _REMOTE_BUILTINS.items()}
_SPECIAL = {
    "infradev.StaleHandle": StaleHandle,
    "infradev.NotEncodable": NotEncodable,
    "infradev.ProtocolError": ProtocolError,
}
_FAULTS = {
    "timeout": SubjectTimeout,
    "crashed": SubjectCrashed,
    "oom": SubjectOutOfMemory,
    "budget": TimeBudgetExceeded,
    "protocol": ProtocolError,
}
_FAULT_TEXT = {
    "timeout": "the subject did not answer in time and was replaced",
    "crashed": "the subject died during the call and was replaced",
    "oom": "the subject ran out of memory and was replaced",
    "budget": "the test's subject time ran past its time budget",
    "protocol": "the subject broke the protocol and was replaced",
}
_KINDS = frozenset(("module", "class", "function", "method", "object"))
# The frames the broker sends for a call to the subject, by their exact key sets
# (docs/probe-protocol.md "Frame shapes and limits"): anything else is a ProtocolError.
_SHAPES = {
    frozenset(("id", "ok")): "ok",  # a nested call's reply (inside a callback)
    frozenset(("id", "ok", "subject_ns")): "ok",
    frozenset(("id", "err")): "err",
    frozenset(("id", "err", "subject_ns")): "err",
    frozenset(("id", "callback")): "callback",
    frozenset(("id", "fault", "generation")): "fault",
}


def _shape(msg):
    """What a frame is, from its whole key set."""
    kind = _SHAPES.get(frozenset(msg))
    if kind is None:
        raise ProtocolError("a frame of an unknown shape")
    return kind

# Attribute names answered locally (AttributeError) instead of asking the subject: protocols
# that numpy, torch, pytest, copy and pickle probe for on any object.
_LOCAL_ONLY = frozenset("""
    __array__ __array_interface__ __array_struct__ __array_priority__ __array_function__
    __array_ufunc__ __torch_function__ __torch_dispatch__ __length_hint__ __fspath__
    __getstate__ __setstate__ __reduce__ __reduce_ex__ __getnewargs__ __getnewargs_ex__
    __copy__ __deepcopy__ __set_name__ __class_getitem__ __wrapped__ __tracebackhide__
    __pytest_wrapped__ _pytestfixturefunction __func__ __await__ __aiter__ __anext__
    __next__ _fields __dataclass_fields__ __attrs_attrs__ __origin__ __mro_entries__
    __len__ __iter__ __contains__ __getitem__ _ipython_display_ _repr_html_
    __test__ _mock_name _mock_methods _mock_return_value
""".split())
# What pytest's collection asks of a module-level object (it never needs the subject for it).
_MODULE_LOCAL_ONLY = _LOCAL_ONLY | {"__bases__", "__code__", "__self__", "__call__"}

_BATCH_CHUNK = 4096
_RELEASE_AT = 256
_VALUE, _RAW, _REF = 0, 1, 2
_NO_KWARGS = {"$dict": []}
_MISSING = object()


def _raised_local(exc):
    """The RaisedError form of a judge-side exception (for a callback's ``callback_err``)."""
    builtin = None
    classes = []
    for k in type(exc).__mro__:
        if builtin is None and k in _LOCAL_BUILTINS:
            builtin = _LOCAL_BUILTINS[k]
        ref = k.__dict__.get("_infradev_ref")
        if ref is not None and isinstance(ref, int) and issubclass(k, RemoteException):
            if k.__dict__.get("_infradev_gen") == _client_generation():
                classes.append(ref)
    if builtin is None and isinstance(exc, SubjectError) and exc.builtin in _REMOTE_BUILTINS:
        builtin = exc.builtin
    return {"builtin": builtin, "classes": classes}


def _abandon(exc):
    """``exc``, marked to end the call it is raised in (inside a callback)."""
    exc._infradev_abandon = True
    return exc


def _client_generation():
    c = _client
    return c.generation if c is not None else None


def _check_describe(d):
    if (type(d) is not dict or set(d) != {"kind", "callable", "exception", "builtin"}
            or d["kind"] not in _KINDS or type(d["callable"]) is not bool
            or type(d["exception"]) is not bool
            or not (d["builtin"] is None or d["builtin"] in _REMOTE_BUILTINS)):
        raise ProtocolError("bad describe")
    return d


def _refs_in(value, out, depth=0):
    """The ``$ref`` ids in a wire value (for replies nobody waits for any more)."""
    if depth > wire.MAX_DEPTH:
        return
    if type(value) is list:
        for x in value:
            _refs_in(x, out, depth + 1)
    elif type(value) is dict:
        ref = value.get("$ref")
        if type(ref) is int:
            out.append(ref)
        for x in value.values():
            _refs_in(x, out, depth + 1)


class Client:
    """The judge's side of the broker connection."""

    def __init__(self, sock):
        self.sock = sock
        self.reader = wire.FrameReader(sock, max_frame=wire.MAX_ANSWER)
        self._read = self.reader.read
        self._send = sock.sendall
        self.generation = None
        self.fault = None  # "subject_unavailable" when the broker has no subject for us
        self.next_id = 1
        self.stack = []  # ids of the calls in flight, outermost first
        self.in_callback = 0  # how many of them are inside a judge callback now
        self.busy = 0  # > 0 while a frame exchange must not be interrupted
        self.deferred = False  # an interrupt (the test timeout) arrived while busy
        self.on_deferred = None
        self.last_fault = None
        self.last_subject_ns = None
        self.subject_ns = 0  # total subject time of this connection's calls
        self.calls = 0
        self.rank = None  # the rank a RankClient serves; None for the subject
        self.groups = {}  # group id -> RankGroup, for replies drained late
        self.codec = wire.Codec(
            encode_object=self._encode_object,
            decode_ref=self._decode_ref,
            decode_callback=None,
            tensor_device="available",
            extra_types=(Handle, Method, ModuleProxy),
        )
        self._encode = self.codec.encode
        self._decode = self.codec.decode
        self._reset_generation(None)

    # ---- connection -------------------------------------------------------------------------

    @classmethod
    def connect(cls, path):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        client = cls(sock)
        client.hello()
        return client

    def hello(self):
        self.busy += 1
        try:
            self._send(wire.pack({"op": "hello"}))
            msg = self._read()
        finally:
            self._leave()
        if msg is None or msg.get("op") != "welcome":
            raise ProtocolError("the broker did not welcome the judge")
        gen = msg.get("generation")
        if gen is not None and type(gen) is not int:
            raise ProtocolError("bad generation")
        self.fault = msg.get("fault") if gen is None else None
        self._reset_generation(gen)

    def close(self):
        self.reader.close()
        try:
            self.sock.close()
        except OSError:
            pass

    def _reset_generation(self, gen):
        self.generation = gen
        self.proxies = weakref.WeakValueDictionary()  # ref -> Handle
        self.standins = {}  # ref -> stand-in class
        self.pinned = set()  # refs never released (module proxies, stand-ins)
        self.releases = {}  # refs to release, in order
        self.callbacks = {}  # cb id -> callable
        self.callback_ids = {}  # id(callable) -> cb id
        self.keepalive = []  # objects a request being built refers to
        self._hint = None

    def _leave(self):
        self.busy -= 1
        if self.deferred and self.busy == 0:
            self.deferred = False
            if self.on_deferred is not None:
                self.on_deferred()

    # ---- calls ------------------------------------------------------------------------------

    def sync(self):
        """Before anything is sent: finish calls that were abandoned (an exception left their
        wait), and send pending releases."""
        if len(self.stack) > self.in_callback:
            self._drain()
        if len(self.releases) >= _RELEASE_AT:
            self.flush_releases()

    def flush_releases(self):
        if not self.releases or len(self.stack) > self.in_callback:
            return
        refs = list(self.releases)
        self.releases = {}
        self.call({"op": "release", "refs": refs}, _RAW)

    def call(self, req, kind=_VALUE, hint=None):
        """Sends one request and returns its decoded result (raises the subject's error)."""
        __tracebackhide__ = True
        if len(self.stack) > self.in_callback or len(self.releases) >= _RELEASE_AT:
            self.sync()
        n = self.next_id
        self.next_id = n + 1
        try:
            frame = wire.pack({"op": "call", "id": n, "req": req}, wire.MAX_FRAME)
        except wire.NotEncodable:
            raise ValueError("the request is larger than a frame may be") from None
        except UnicodeEncodeError:
            raise ValueError("a string in the request is not valid UTF-8") from None
        finally:
            self.keepalive.clear()
        self.busy += 1
        try:
            self._send(frame)
            self.stack.append(n)
            self.calls += 1
            return self._wait(n, kind, hint)
        finally:
            self._leave()

    def _wait(self, n, kind, hint):
        __tracebackhide__ = True
        read = self._read
        while True:
            msg = read()
            if msg is None:
                raise ProtocolError("the broker closed the connection")
            what = _shape(msg)
            if what == "fault":
                raise self._on_fault(msg)
            if msg["id"] != n:
                raise ProtocolError("a reply to another call")
            if what == "ok":
                self.stack.pop()
                ns = msg.get("subject_ns")
                if type(ns) is int:
                    self.last_subject_ns = ns
                    self.subject_ns += ns
                return self._reply_value(msg["ok"], kind, hint)
            if what == "err":
                self.stack.pop()
                raise self.remote_error(msg["err"], hint)
            self._serve_callback(n, msg["callback"])

    def _reply_value(self, value, kind, hint):
        """A reply's ``ok`` value as the caller asked for it: decoded, a handle, or raw."""
        if kind == _VALUE:
            self._hint = hint
            try:
                return self._decode(value)
            finally:
                self._hint = None
        if kind == _REF:
            return self._import_ref(value)
        return value

    def _on_fault(self, msg):
        """A fault ends every call in flight: the subject is gone, its handles with it."""
        name = msg.get("fault")
        gen = msg.get("generation")
        if gen is not None and type(gen) is not int:
            gen = None
        self.stack.clear()
        self._reset_generation(gen)
        cls = _FAULTS.get(name, ProtocolError)
        exc = cls(_FAULT_TEXT.get(name, "the broker reported a fault"))
        self.last_fault = exc
        return exc

    def _drain(self):
        """Reads the replies of abandoned calls (answering their callbacks with an error)."""
        self.busy += 1
        try:
            while len(self.stack) > self.in_callback:
                top = self.stack[-1]
                msg = self._read()
                if msg is None:
                    raise ProtocolError("the broker closed the connection")
                if "group" in msg:  # a rank call's late reply: its handles are the rank's
                    if msg.get("id") != top:
                        raise ProtocolError("a reply to another call")
                    self.stack.pop()
                    group = self.groups.get(msg.get("group"))
                    if "fault" in msg and group is not None:
                        group._ended()
                    continue
                what = _shape(msg)
                if what == "fault":
                    self._on_fault(msg)
                    return
                if msg["id"] != top:
                    raise ProtocolError("a reply to another call")
                if what == "callback":
                    self._send(wire.pack({"id": top, "callback_err": {
                        "builtin": "RuntimeError", "classes": []}}))
                    continue
                self.stack.pop()
                refs = []
                _refs_in(msg.get("ok"), refs)
                for r in refs:
                    if r not in self.pinned and r not in self.proxies and r not in self.standins:
                        self.releases[r] = None
        finally:
            self._leave()

    # ---- events -----------------------------------------------------------------------------

    def event(self, event):
        """Sends one lifecycle event (no answer)."""
        if len(self.stack) > self.in_callback:
            self._drain()
        self.busy += 1
        try:
            self._send(wire.pack({"op": "event", "event": event}))
        finally:
            self._leave()

    def start(self, nodeid):
        """Sends ``start`` and waits until the broker has armed its measurement."""
        if len(self.stack) > self.in_callback:
            self._drain()
        try:
            self.flush_releases()  # before measurement starts
        except (Exception, SubjectFault):  # the releases are lost with a lost subject
            pass
        self.busy += 1
        try:
            self._send(wire.pack({"op": "event", "event": {"event": "start", "nodeid": nodeid}}))
            while True:
                msg = self._read()
                if msg is None:
                    raise ProtocolError("the broker closed the connection")
                if msg == {"op": "started", "nodeid": nodeid}:
                    return
                raise ProtocolError("the broker did not answer start")
        finally:
            self._leave()

    # ---- callbacks --------------------------------------------------------------------------

    def callback_id(self, fn):
        key = id(fn)
        cb = self.callback_ids.get(key)
        if cb is None or self.callbacks.get(cb) is not fn:
            cb = len(self.callbacks) + 1
            self.callbacks[cb] = fn
            self.callback_ids[key] = cb
        return cb

    def _serve_callback(self, n, payload):
        __tracebackhide__ = True
        gen = self.generation
        ok = False
        exc = None
        result = None
        saved = self.busy
        self.busy = 0
        self.in_callback += 1
        try:
            if type(payload) is not dict or set(payload) != {"cb", "args", "kwargs"}:
                raise _abandon(ProtocolError("bad callback"))
            fn = self.callbacks.get(payload["cb"]) if type(payload["cb"]) is int else None
            if fn is None:  # never handed out: the subject forged it
                raise _abandon(ProtocolError("unknown callback"))
            args = self._decode(payload.get("args", []))
            kwargs = self._decode(payload.get("kwargs", _NO_KWARGS))
            if type(args) is not list or type(kwargs) is not dict:
                raise ProtocolError("bad callback arguments")
            if self.deferred:  # the test's time ran out while we waited
                self.deferred = False
                if self.on_deferred is not None:
                    self.on_deferred()
            result = fn(*args, **kwargs)
            ok = True
        except BaseException as e:  # noqa: B036 - reported to the subject, maybe re-raised
            exc = e
        finally:
            self.in_callback -= 1
            self.busy = saved
        if gen != self.generation or n not in self.stack:
            # A nested call faulted: the subject that asked is gone.
            if exc is not None:
                raise exc
            raise self.last_fault or SubjectCrashed("the subject was replaced during a callback")
        frame = None
        if ok:
            try:
                frame = wire.pack({"id": n, "callback_ok": self._encode(result)})
            except Exception as e:  # the result cannot cross
                ok, exc = False, e
            finally:
                self.keepalive.clear()
        if not ok:
            frame = wire.pack({"id": n, "callback_err": _raised_local(exc)})
        self._send(frame)
        if exc is not None and (not isinstance(exc, Exception)
                                or getattr(exc, "_infradev_abandon", False)):
            raise exc  # the call is abandoned; its reply is drained later

    # ---- values -----------------------------------------------------------------------------

    def _encode_object(self, obj):
        t = type(obj)
        if t is Handle or isinstance(obj, ModuleProxy):
            return {"$ref": self._own(obj, obj._infradev_r())}
        if t is Method:
            h = obj._infradev_resolve()
            self.keepalive.append(h)
            return {"$ref": self._own(h, h._infradev_r())}
        if isinstance(obj, type) and issubclass(obj, RemoteException):
            ref = obj.__dict__.get("_infradev_ref")
            if ref is not None:
                if obj.__dict__.get("_infradev_gen") != self.generation:
                    raise StaleHandle("a stand-in class from an earlier subject was used")
                return {"$ref": ref}
        if callable(obj):
            return {"$callback": self.callback_id(obj)}
        raise TypeError("a %s cannot be sent to the subject" % t.__name__)

    def _own(self, handle, ref):
        """``ref`` if ``handle`` lives in this connection's subject (or rank)."""
        other = handle._infradev_c
        if other is not self and (self.rank is not None or other.rank is not None):
            raise StaleHandle("a handle of another subject or rank was used")
        return ref

    def _decode_ref(self, tag):
        ref = tag.get("$ref")
        if len(tag) != 2 or type(ref) is not int or ref <= 0 or "describe" not in tag:
            raise ProtocolError("bad $ref")
        desc = _check_describe(tag["describe"])
        if ref in self.releases:
            del self.releases[ref]
        p = self.proxies.get(ref)
        if p is not None:
            return p
        cls = self.standins.get(ref)
        if cls is not None:
            return cls
        if desc["kind"] == "class" and desc["exception"]:
            return self._standin(ref, desc)
        p = Handle(self, ref, self.generation, desc)
        self.proxies[ref] = p
        return p

    def _import_ref(self, tag):
        if type(tag) is not dict or len(tag) != 2 or type(tag.get("$ref")) is not int:
            raise ProtocolError("bad import reply")
        _check_describe(tag.get("describe"))
        ref = tag["$ref"]
        self.releases.pop(ref, None)
        self.pinned.add(ref)
        return ref

    def _standin(self, ref, desc):
        name = self._hint if isinstance(self._hint, str) and self._hint.isidentifier() else None
        base = _REMOTE_BUILTINS.get(desc["builtin"])
        bases = (RemoteException,) if base in (None, Exception) else (RemoteException, base)
        try:
            cls = type(name or "RemoteError", bases, {})
        except TypeError:
            cls = type(name or "RemoteError", (RemoteException,), {})
        cls.__module__ = "infradev_probe.remote"
        cls._infradev_ref = ref
        cls._infradev_gen = self.generation
        cls._infradev_builtin = desc["builtin"]
        self.standins[ref] = cls
        self.pinned.add(ref)
        return cls

    def remote_error(self, err, hint=None):
        """The local exception for a RaisedError."""
        if type(err) is not dict or set(err) != {"builtin", "classes"}:
            return ProtocolError("bad error reply")
        name = err["builtin"]
        classes = err["classes"]
        if type(classes) is not list:
            return ProtocolError("bad error reply")
        special = _SPECIAL.get(name)
        if special is not None:
            return special({
                StaleHandle: "the subject does not know this handle",
                NotEncodable: "the object cannot cross by value",
                ProtocolError: "the subject could not read the request",
            }[special])
        if name is not None and name not in _REMOTE_BUILTINS:
            return ProtocolError("bad builtin in an error reply")
        base = _REMOTE_BUILTINS.get(name)
        standins = []
        for ref in classes:
            cls = self.standins.get(ref) if type(ref) is int else None
            if cls is not None:
                standins.append(cls)
        standins.sort(key=lambda c: -len(c.__mro__))  # most derived first
        cls = _error_class(base, tuple(standins))
        what = standins[0].__name__ if standins else (name or "an exception")
        text = "the subject raised %s" % what
        if standins and name:
            text += " (%s)" % name
        if hint:
            text += " in %s" % hint
        exc = cls(text)
        exc.builtin = name
        return exc


_error_classes = {}


def _error_class(base, standins):
    key = (base, standins)
    cls = _error_classes.get(key)
    if cls is not None:
        return cls
    name = standins[0].__name__ if standins else (base.__name__ if base else "SubjectError")
    candidates = []
    extra = () if base in (None, Exception) or any(issubclass(s, base) for s in standins) else (base,)
    for k in range(len(standins), -1, -1):
        head = standins[:k] if k else (SubjectError,)
        candidates.append(head + extra)
    candidates.append((SubjectError,))
    for bases in candidates:
        try:
            cls = type(name, bases, {"__module__": "infradev_probe.remote"})
            break
        except TypeError:
            continue
    _error_classes[key] = cls
    return cls


# --------------------------------------------------------------------------------------------
# The process's connection


_client = None


def client():
    """The connection, opened on first use from ``INFRADEV_BROKER``."""
    global _client
    c = _client
    if c is None:
        path = os.environ.get("INFRADEV_BROKER")
        if not path:
            raise ProtocolError("INFRADEV_BROKER is not set: no broker to reach the subject")
        c = _client = Client.connect(path)
    return c


def set_client(c):
    """Installs a connection (the plugin's, or a test's); returns the previous one."""
    global _client
    old, _client = _client, c
    return old


def current_client():
    return _client


# --------------------------------------------------------------------------------------------
# Proxies


def _args(enc, args):
    return enc(list(args)) if args else []


def _kwargs(enc, kwargs):
    return enc(kwargs) if kwargs else _NO_KWARGS


class Handle:
    """A subject object that did not cross by value. Attribute access, calls, item access
    (``h[k]``, ``h[k] = v``), ``with`` and ``isinstance(x, h)`` are requests to the subject.
    Operators whose answer the judge would take as its own are not: ``==``, ``!=``, ``<``,
    ``<=``, ``>``, ``>=``, ``bool``, ``len``, ``in``, ``hash``, iteration, arithmetic (plain,
    reflected and in place), unary ``-``/``+``/``abs``/``~``, ``int``, ``float``, ``complex``,
    ``bytes``, ``round``/``math.floor``... and use as an index raise HandleOperatorError (the
    judge decides on data only: fetch the value, or ask explicitly with ``subject_op``).
    ``repr`` is local (it never shows subject text); ``is`` compares handles (one subject
    object has one handle while the judge holds it)."""

    __slots__ = ("_infradev_c", "_infradev_ref", "_infradev_gen", "_infradev_desc",
                 "_infradev_methods", "__weakref__")

    def __init__(self, c, ref, gen, desc):
        s = object.__setattr__
        s(self, "_infradev_c", c)
        s(self, "_infradev_ref", ref)
        s(self, "_infradev_gen", gen)
        s(self, "_infradev_desc", desc)
        s(self, "_infradev_methods", {})

    def _infradev_r(self):
        if self._infradev_gen != self._infradev_c.generation:
            raise StaleHandle("a handle from an earlier subject was used")
        return self._infradev_ref

    def _infradev_obj(self):
        return {"$ref": self._infradev_r()}

    def __del__(self):
        try:
            c = self._infradev_c
            ref = self._infradev_ref
            if (c.generation == self._infradev_gen and ref is not None
                    and ref not in c.pinned):
                c.releases[ref] = None
        except Exception:
            pass

    # ---- attributes -------------------------------------------------------------------------

    def __getattr__(self, name):
        __tracebackhide__ = True
        if name.startswith("_infradev") or name in _LOCAL_ONLY:
            raise AttributeError(name)
        m = self._infradev_methods.get(name)
        if m is not None:
            if self._infradev_gen != self._infradev_c.generation:
                raise StaleHandle("a handle from an earlier subject was used")
            return m
        if name == "__signature__":
            return _signature(self)
        obj = self._infradev_obj()
        c = self._infradev_c
        v = c.call({"op": "getattr", "obj": obj, "name": name}, _VALUE, name)
        if type(v) is Handle and v._infradev_desc["kind"] == "method":
            m = Method(self, name)
            self._infradev_methods[name] = m
            return m
        return v

    def __setattr__(self, name, value):
        __tracebackhide__ = True
        obj = self._infradev_obj()
        c = self._infradev_c
        self._infradev_methods.pop(name, None)
        c.call({"op": "setattr", "obj": obj, "name": name,
                "value": c._encode(value)}, _RAW, name)

    def __delattr__(self, name):
        __tracebackhide__ = True
        obj = self._infradev_obj()
        self._infradev_methods.pop(name, None)
        self._infradev_c.call({"op": "delattr", "obj": obj, "name": name},
                              _RAW, name)

    def __dir__(self):
        # pytest and debuggers list attributes while reporting a failure; a handle whose
        # subject or rank group has ended lists none instead of raising over the real fault.
        try:
            obj = self._infradev_obj()
        except StaleHandle:
            return []
        return self._infradev_c.call({"op": "dir", "obj": obj})

    # ---- calls ------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        __tracebackhide__ = True
        obj = self._infradev_obj()
        c = self._infradev_c
        enc = c._encode
        return c.call({"op": "call", "obj": obj, "args": _args(enc, args),
                       "kwargs": _kwargs(enc, kwargs)})

    # ---- containers -------------------------------------------------------------------------

    def __getitem__(self, key):
        __tracebackhide__ = True
        obj = self._infradev_obj()
        c = self._infradev_c
        return c.call({"op": "getitem", "obj": obj, "key": c._encode(key)})

    def __setitem__(self, key, value):
        __tracebackhide__ = True
        obj = self._infradev_obj()
        c = self._infradev_c
        c.call({"op": "setitem", "obj": obj, "key": c._encode(key),
                "value": c._encode(value)}, _RAW)

    def __delitem__(self, key):
        __tracebackhide__ = True
        obj = self._infradev_obj()
        c = self._infradev_c
        c.call({"op": "delitem", "obj": obj, "key": c._encode(key)}, _RAW)

    # ---- type checks ------------------------------------------------------------------------

    def __instancecheck__(self, instance):
        return _remote_isinstance(instance, self)

    def __subclasscheck__(self, subclass):
        c = self._infradev_c
        return c.call({"op": "issubclass", "cls": c._encode(subclass), "base": self._infradev_obj()})

    # ---- context managers -------------------------------------------------------------------

    def __enter__(self):
        return self.__getattr__("__enter__")()

    def __exit__(self, exc_type, exc, tb):
        return self.__getattr__("__exit__")(None, None, None)

    def __repr__(self):
        try:
            kind = self._infradev_desc["kind"]
        except Exception:
            kind = "object"
        return "<subject %s #%s>" % (kind, self._infradev_ref)

    __str__ = __repr__


# The operators a handle refuses (HandleOperatorError), with how a probe writes them. Each
# would run the submission's code on the judge's behalf and hand back an answer the judge would
# trust; ``subject_op`` asks for it explicitly.
_COMPARISONS = {"__eq__": "==", "__ne__": "!=", "__lt__": "<", "__le__": "<=", "__gt__": ">",
                "__ge__": ">="}
_ARITHMETIC = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//",
               "mod": "%", "pow": "**", "matmul": "@", "and": "&", "or": "|", "xor": "^",
               "lshift": "<<", "rshift": ">>"}
_UNARY = {"__neg__": "unary -", "__pos__": "unary +", "__abs__": "abs()",
          "__invert__": "~"}
_CONVERSIONS = {"__bool__": "bool()", "__len__": "len()", "__contains__": "in",
                "__hash__": "hash()", "__iter__": "iteration", "__reversed__": "reversed()",
                "__index__": "use as an integer index", "__int__": "int()",
                "__float__": "float()", "__complex__": "complex()", "__bytes__": "bytes()",
                "__round__": "round()", "__trunc__": "math.trunc()",
                "__floor__": "math.floor()", "__ceil__": "math.ceil()",
                "__divmod__": "divmod()", "__rdivmod__": "divmod()"}
REFUSED_OPERATORS = dict(_COMPARISONS)
for _name, _symbol in _ARITHMETIC.items():
    REFUSED_OPERATORS["__%s__" % _name] = _symbol
    REFUSED_OPERATORS["__r%s__" % _name] = "%s (reflected)" % _symbol
    REFUSED_OPERATORS["__i%s__" % _name] = "%s=" % _symbol
REFUSED_OPERATORS.update(_UNARY)
REFUSED_OPERATORS.update(_CONVERSIONS)


def _refused(name, symbol):
    def op(self, *args):
        __tracebackhide__ = True
        raise HandleOperatorError(name, symbol)

    op.__name__ = name
    op.__qualname__ = "Handle." + name
    return op


for _name, _symbol in REFUSED_OPERATORS.items():
    setattr(Handle, _name, _refused(_name, _symbol))
del _name, _symbol

# ``handle.__doc__`` / ``handle.__module__`` are the subject object's, not this class's.
for _attr in ("__doc__", "__module__"):
    try:
        delattr(Handle, _attr)
    except (AttributeError, TypeError):
        pass
del _attr


class Method:
    """``handle.name`` for a name known to be a method: calling it is one ``call_method`` round
    trip. Anything else done with it fetches the bound method first."""

    __slots__ = ("_infradev_owner", "_infradev_name", "__weakref__")

    def __init__(self, owner, name):
        object.__setattr__(self, "_infradev_owner", owner)
        object.__setattr__(self, "_infradev_name", name)

    def __call__(self, *args, **kwargs):
        __tracebackhide__ = True
        owner = self._infradev_owner
        c = owner._infradev_c
        enc = c._encode
        return c.call({"op": "call_method", "obj": owner._infradev_obj(),
                       "name": self._infradev_name, "args": _args(enc, args),
                       "kwargs": enc(kwargs) if kwargs else _NO_KWARGS},
                      _VALUE, self._infradev_name)

    def _infradev_resolve(self):
        owner = self._infradev_owner
        c = owner._infradev_c
        v = c.call({"op": "getattr", "obj": owner._infradev_obj(), "name": self._infradev_name},
                   _VALUE, self._infradev_name)
        if type(v) is not Handle:
            # No longer a method (rebound to a plain value): forget the shortcut.
            owner._infradev_methods.pop(self._infradev_name, None)
        return v

    def __getattr__(self, name):
        if name.startswith("_infradev") or name in _LOCAL_ONLY:
            raise AttributeError(name)
        if name == "__signature__":
            return _signature(self._infradev_resolve())
        return getattr(self._infradev_resolve(), name)

    # A bound method is a subject object too: comparing or hashing it would ask the subject.
    __eq__ = _refused("__eq__", "==")
    __ne__ = _refused("__ne__", "!=")
    __hash__ = _refused("__hash__", "hash()")

    def __repr__(self):
        return "<subject method %s of %r>" % (self._infradev_name, self._infradev_owner)

    __str__ = __repr__


class ModuleProxy(Handle):
    """``subject.module(name)``: imported on first use, and again in each new subject."""

    __slots__ = ("_infradev_module",)

    def __init__(self, c, name):
        Handle.__init__(self, c, None, None, {"kind": "module", "callable": False,
                                                "exception": False, "builtin": None})
        object.__setattr__(self, "_infradev_module", name)

    def _infradev_r(self):
        c = client()
        if (self._infradev_ref is None or self._infradev_gen != c.generation
                or self._infradev_c is not c):
            ref = c.call({"op": "import", "module": self._infradev_module}, _REF,
                         self._infradev_module)
            s = object.__setattr__
            s(self, "_infradev_c", c)
            s(self, "_infradev_ref", ref)
            s(self, "_infradev_gen", c.generation)
            self._infradev_methods.clear()
            c.proxies[ref] = self
        return self._infradev_ref

    def _infradev_obj(self):
        return {"$ref": self._infradev_r()}

    def __getattr__(self, name):
        __tracebackhide__ = True
        if name in _MODULE_LOCAL_ONLY:
            raise AttributeError(name)
        if not name.startswith("_infradev"):
            self._infradev_r()  # the current generation's module (the client may change)
        return Handle.__getattr__(self, name)

    def __repr__(self):
        return "<subject module %s>" % self._infradev_module

    __str__ = __repr__


def _remote_isinstance(obj, cls, c=None):
    c = c or client()
    classes = list(cls) if type(cls) is tuple else cls
    return c.call({"op": "isinstance", "obj": c._encode(obj), "cls": c._encode(classes)})


def _signature(obj, c=None):
    """An ``inspect.Signature`` built locally from the subject's parameter list."""
    c = c or client()
    raw = c.call({"op": "signature", "obj": c._encode(obj)}, _RAW)
    if type(raw) is not dict or set(raw) != {"params"} or type(raw["params"]) is not list:
        raise ProtocolError("bad signature reply")
    params = []
    for p in raw["params"]:
        if type(p) is not dict or not {"name", "kind"} <= set(p) <= {"name", "kind", "default"}:
            raise ProtocolError("bad signature reply")
        kind = getattr(inspect.Parameter, p["kind"], None) if type(p["kind"]) is str else None
        if not isinstance(kind, inspect._ParameterKind) or type(p["name"]) is not str:
            raise ProtocolError("bad signature reply")
        default = c._decode(p["default"]) if "default" in p else inspect.Parameter.empty
        try:
            params.append(inspect.Parameter(p["name"], kind, default=default))
        except (ValueError, TypeError):
            raise ProtocolError("bad signature reply") from None
    try:
        return inspect.Signature(params)
    except (ValueError, TypeError):
        raise ProtocolError("bad signature reply") from None


def _target(obj, c=None):
    """(request fields, hint) for calling ``obj``: a method shortcut or a callable handle."""
    if type(obj) is Method:
        owner = obj._infradev_owner
        if c is not None and owner._infradev_c is not c and type(owner) is not ModuleProxy:
            raise StaleHandle("a handle of another subject or rank was used")
        return {"op": "call_method", "obj": owner._infradev_obj(), "name": obj._infradev_name}, \
            obj._infradev_name
    c = c or client()
    return {"op": "call", "obj": c._encode(obj)}, None


# --------------------------------------------------------------------------------------------
# The explicit opt-in: an operator evaluated by the subject


# How subject_op asks for each operator (docs/probe-protocol.md, "Requests").
_WIRE_BINARY = {"__%s__" % n: n for n in list(_ARITHMETIC) + ["lt", "le", "gt", "ge", "eq", "ne"]}
_WIRE_REFLECTED = {"__r%s__" % n: n for n in _ARITHMETIC}
_WIRE_UNARY = {"__neg__": "neg", "__pos__": "pos", "__abs__": "abs", "__invert__": "invert"}
_WIRE_SINGLE = {"__len__": "len", "__bool__": "bool", "__hash__": "hash", "__iter__": "iter"}


def _client_of(obj):
    """The connection a handle (or method, or module proxy) lives on; the subject's for a
    value."""
    h = obj._infradev_owner if type(obj) is Method else obj
    if isinstance(h, Handle):
        h._infradev_r()  # a module proxy imports now (in the current subject); stale: raises
        return h._infradev_c
    return client()


def subject_op(obj, name, *args):
    """What the subject's own operator ``name`` answers for ``obj``: ``subject_op(h, "__eq__",
    8)`` is ``h == 8`` evaluated in the subject, by the submission's code. The explicit opt-in
    for the operators a handle refuses (HandleOperatorError).

    The answer is the submission's, not a fact the judge has checked: a class of the submission
    decides what its ``__eq__``, ``__lt__``, ``__contains__``, ``__hash__`` or ``__bool__`` says
    about the judge's value, so such an answer must never decide a probe (fetch the value and
    compare it in the judge instead). Use it to drive the subject, or where the question is
    the subject's own semantics. Returns the result as any call's: a value, or a handle.

    Comparisons and arithmetic (``__add__``, ``__radd__`` (``other + obj``)...) go through
    Python's operator protocol in the subject (``operator.eq(obj, other)``); ``__len__``,
    ``__bool__``, ``__hash__``, ``__contains__`` and ``__iter__`` (the items, as a list) through
    ``len``, ``bool``, ``hash``, ``in`` and ``iter``; any other dunder name is called as the
    method ``obj.<name>(*args)`` (``__iadd__``, ``__index__``, ``__float__``...)."""
    __tracebackhide__ = True
    if type(name) is not str or len(name) < 5 or not (name[:2] == name[-2:] == "__"):
        raise ValueError("subject_op takes an operator's dunder name, such as '__eq__'")
    c = _client_of(obj)
    enc = c._encode

    def arity(n):
        if len(args) != n:
            raise TypeError("subject_op(obj, %r, ...) takes %d operand%s after obj"
                            % (name, n, "" if n == 1 else "s"))

    if name in _WIRE_BINARY:
        arity(1)
        req = {"op": "binop", "binop": _WIRE_BINARY[name], "a": enc(obj), "b": enc(args[0])}
    elif name in _WIRE_REFLECTED:
        arity(1)
        req = {"op": "binop", "binop": _WIRE_REFLECTED[name], "a": enc(args[0]), "b": enc(obj)}
    elif name in _WIRE_UNARY:
        arity(0)
        req = {"op": "unop", "unop": _WIRE_UNARY[name], "a": enc(obj)}
    elif name in _WIRE_SINGLE:
        arity(0)
        req = {"op": _WIRE_SINGLE[name], "obj": enc(obj)}
    elif name == "__contains__":
        arity(1)
        req = {"op": "contains", "obj": enc(obj), "item": enc(args[0])}
    else:
        req = {"op": "call_method", "obj": enc(obj), "name": name,
               "args": enc(list(args)) if args else [], "kwargs": _NO_KWARGS}
    return c.call(req, _VALUE, name)
