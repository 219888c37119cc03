"""``subject.batch()``: many requests in one round trip, each with its own outcome."""

from . import _core
from ._core import _NO_KWARGS, _RAW, _target, client
from ._errors import ProtocolError


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
        """Queues ``len(obj)`` evaluated in the subject (asked explicitly, like
        ``subject_op(obj, "__len__")``: the submission's own answer about its object)."""
        return self._add({"op": "len", "obj": self._c._encode(obj)}, None, obj)

    def contains(self, obj, item):
        """Queues ``item in obj`` evaluated in the subject: the submission's verdict on the
        judge's ``item`` (like ``subject_op(obj, "__contains__", item)``), never a check."""
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
