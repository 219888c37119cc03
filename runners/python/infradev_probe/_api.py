"""``subject``: the probes' one way to reach the submission, and ``subject.batch()``."""

from . import _core
from ._core import (
    _NO_KWARGS,
    _RAW,
    _VALUE,
    Handle,
    Method,
    ModuleProxy,
    _check_describe,
    _remote_isinstance,
    _signature,
    client,
)
from ._errors import ProtocolError, StaleHandle


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


class Subject:
    """The submission, as the judge sees it. Everything goes through the broker."""

    def __init__(self):
        self._modules = {}

    def _client(self):
        """The connection this object's requests go through."""
        return client()

    def module(self, name):
        """A proxy for the subject's module ``name`` (``"pkg.mod"``), imported on first use
        and again in every new subject after a crash."""
        if type(name) is not str or not name or name.startswith("."):
            raise ValueError("a module is named by its absolute dotted name")
        proxy = self._modules.get(name)
        if proxy is None:
            proxy = self._modules[name] = ModuleProxy(_core.current_client(), name)
        return proxy

    # ---- values -----------------------------------------------------------------------------

    def put(self, value):
        """A handle to a copy of ``value`` living in the subject (for in-place APIs)."""
        c = self._client()
        return c.call({"op": "put", "value": c._encode(value)})

    def fetch(self, obj):
        """The object by value (NotEncodable when it cannot cross). Values are returned as
        they are."""
        if not isinstance(obj, (Handle, Method)):
            return obj
        c = self._client()
        return c.call({"op": "fetch", "obj": c._encode(obj)})

    def keep(self, fn, *args, **kwargs):
        """Calls ``fn`` and returns the result as a handle, even when it could cross by value."""
        req, hint = _target(fn, self._client())
        c = self._client()
        req["args"] = c._encode(list(args)) if args else []
        req["kwargs"] = c._encode(kwargs) if kwargs else _NO_KWARGS
        req["keep"] = True
        return c.call(req, _VALUE, hint)

    def call(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` in the subject (the same as calling the handle)."""
        req, hint = _target(fn, self._client())
        c = self._client()
        req["args"] = c._encode(list(args)) if args else []
        req["kwargs"] = c._encode(kwargs) if kwargs else _NO_KWARGS
        return c.call(req, _VALUE, hint)

    # ---- introspection ----------------------------------------------------------------------

    def signature(self, obj):
        """``inspect.signature`` of a subject callable, as a local ``inspect.Signature``
        (parameter names, kinds and defaults; no annotations)."""
        return _signature(obj, self._client())

    def describe(self, obj):
        """``{"kind", "callable", "exception", "builtin"}`` of a subject object."""
        c = self._client()
        return _check_describe(c.call({"op": "describe", "obj": c._encode(obj)}, _RAW))

    def isinstance(self, obj, cls):
        """``isinstance`` evaluated in the subject (``cls``: a handle or a tuple of them)."""
        return _remote_isinstance(obj, cls, self._client())

    def issubclass(self, cls, base):
        c = self._client()
        bases = list(base) if type(base) is tuple else base
        return c.call({"op": "issubclass", "cls": c._encode(cls), "base": c._encode(bases)})

    def dir(self, obj):
        c = self._client()
        return c.call({"op": "dir", "obj": c._encode(obj)})

    def getattr(self, obj, name, *default):
        """``getattr`` in the subject, for any name (dunders included)."""
        c = self._client()
        try:
            return c.call({"op": "getattr", "obj": c._encode(obj), "name": name}, _VALUE, name)
        except AttributeError:
            if default:
                return default[0]
            raise

    def hasattr(self, obj, name):
        try:
            self.getattr(obj, name)
        except AttributeError:
            return False
        return True

    def hash(self, obj):
        c = self._client()
        return c.call({"op": "hash", "obj": c._encode(obj)})

    # ---- rank groups -------------------------------------------------------------------------

    def ranks(self, world_size):
        """A group of ``world_size`` (2-4) ranks, each a subject sandbox of its own:
        ``with subject.ranks(2) as group: group.call_all("pkg.mod", "fn", [(a,), (b,)])``."""
        from ._ranks import RankGroup

        return RankGroup(world_size)

    # ---- batches ----------------------------------------------------------------------------

    def batch(self):
        """A batch: requests queued in the ``with`` block go in one round trip at its end."""
        return Batch(self._client())

    # ---- state ------------------------------------------------------------------------------

    @property
    def generation(self):
        """The current subject's number (a new one after each crash)."""
        return self._client().generation

    @property
    def last_subject_ns(self):
        """The broker's measure of the last call's subject time (ns)."""
        return self._client().last_subject_ns

    def release(self):
        """Sends pending handle releases now."""
        self._client().flush_releases()


class BatchItem:
    """One request of a batch; its outcome once the batch has run."""

    __slots__ = ("done", "ok", "_value", "_error")

    def __init__(self):
        self.done = False
        self.ok = None
        self._value = None
        self._error = None

    @property
    def value(self):
        """The result; raises the subject's error if the request failed."""
        __tracebackhide__ = True
        if not self.done:
            raise RuntimeError("the batch has not run yet")
        if not self.ok:
            raise self._error
        return self._value

    @property
    def error(self):
        """The exception of a failed request (None when it succeeded)."""
        if not self.done:
            raise RuntimeError("the batch has not run yet")
        return self._error

    def __repr__(self):
        if not self.done:
            return "<batch item (pending)>"
        return "<batch item %s>" % ("ok" if self.ok else type(self._error).__name__)


class Batch:
    """Queues requests and runs them in one ``batch`` request (several for very large
    batches) when the ``with`` block ends or ``run()`` is called. Every request runs, in order,
    whatever the others did; ``results`` raises the first error, ``items`` tells each one."""

    def __init__(self, c=None):
        self._c = c or client()
        self._reqs = []
        self._hints = []
        self.items = []
        self._keep = []  # the handles the queued requests name, alive until they ran

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.run()
        return False

    def _add(self, req, hint=None, *alive):
        c = self._c
        if c.keepalive:
            self._keep.extend(c.keepalive)
            c.keepalive.clear()
        self._keep.append(alive)
        self._reqs.append(req)
        self._hints.append(hint)
        item = BatchItem()
        self.items.append(item)
        return item

    def call(self, fn, *args, **kwargs):
        """Queues ``fn(*args, **kwargs)``; ``obj.method`` queues one ``call_method``."""
        req, hint = _target(fn, self._c)
        enc = self._c._encode
        req["args"] = enc(list(args)) if args else []
        req["kwargs"] = enc(kwargs) if kwargs else _NO_KWARGS
        return self._add(req, hint, fn, args, kwargs)

    def call_method(self, obj, name, *args, **kwargs):
        enc = self._c._encode
        req = {"op": "call_method", "obj": enc(obj), "name": name,
               "args": enc(list(args)) if args else [],
               "kwargs": enc(kwargs) if kwargs else _NO_KWARGS}
        return self._add(req, name, obj, args, kwargs)

    def getattr(self, obj, name):
        return self._add({"op": "getattr", "obj": self._c._encode(obj), "name": name}, name, obj)

    def setattr(self, obj, name, value):
        enc = self._c._encode
        return self._add({"op": "setattr", "obj": enc(obj), "name": name, "value": enc(value)},
                         name, obj, value)

    def getitem(self, obj, key):
        enc = self._c._encode
        return self._add({"op": "getitem", "obj": enc(obj), "key": enc(key)}, None, obj, key)

    def setitem(self, obj, key, value):
        enc = self._c._encode
        return self._add({"op": "setitem", "obj": enc(obj), "key": enc(key), "value": enc(value)},
                         None, obj, key, value)

    def len(self, obj):
        return self._add({"op": "len", "obj": self._c._encode(obj)}, None, obj)

    def contains(self, obj, item):
        enc = self._c._encode
        return self._add({"op": "contains", "obj": enc(obj), "item": enc(item)}, None, obj, item)

    def fetch(self, obj):
        return self._add({"op": "fetch", "obj": self._c._encode(obj)}, None, obj)

    def run(self):
        """Runs the queued requests (a no-op when there are none)."""
        __tracebackhide__ = True
        c = self._c
        pending = [i for i, item in enumerate(self.items) if not item.done]
        for start in range(0, len(pending), _core._BATCH_CHUNK):
            idx = pending[start:start + _core._BATCH_CHUNK]
            reply = c.call({"op": "batch", "reqs": [self._reqs[i] for i in idx]}, _RAW)
            if type(reply) is not list or len(reply) != len(idx):
                raise ProtocolError("bad batch reply")
            for i, entry in zip(idx, reply):
                item = self.items[i]
                if type(entry) is not dict or len(entry) != 1:
                    raise ProtocolError("bad batch reply")
                if "ok" in entry:
                    c._hint = self._hints[i]
                    try:
                        item._value = c._decode(entry["ok"])
                    finally:
                        c._hint = None
                    item.ok = True
                elif "err" in entry:
                    item._error = c.remote_error(entry["err"], self._hints[i])
                    item.ok = False
                else:
                    raise ProtocolError("bad batch reply")
                item.done = True
        self._reqs = [None] * len(self._reqs)
        self._keep = []

    @property
    def results(self):
        """Every request's result, in order; raises the first failed request's error."""
        __tracebackhide__ = True
        out = []
        for item in self.items:
            out.append(item.value)
        return out

    @property
    def errors(self):
        """Every request's exception (None for those that succeeded), in order."""
        return [item.error for item in self.items]

    def __len__(self):
        return len(self.items)


subject = Subject()
