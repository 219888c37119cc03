"""What the subject and each rank of a group offer the probes (``subject.module``, ``put``,
``fetch``, ``keep``, ``call``, ``signature``, ``batch``...): the base of ``Subject`` and ``Rank``."""

from . import _core
from ._batch import Batch
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
    _target,
    client,
)


class Endpoint:
    """What ``subject`` and each rank of a group offer: module proxies, values (``put``,
    ``fetch``, ``keep``), calls, introspection and batches. Everything goes through the
    broker."""

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
        """The object by value (NotEncodable when it cannot cross): how a probe gets data to
        decide on. A builtin subclass comes back as its base type's value (an ``IntEnum``
        member as its int, a named tuple as a tuple). Values are returned as they are."""
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
        """``hash(obj)`` evaluated in the subject: the submission's own answer (like
        ``infradev_probe.subject_op(obj, "__hash__")``), never a check of the judge's."""
        c = self._client()
        return c.call({"op": "hash", "obj": c._encode(obj)})

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
