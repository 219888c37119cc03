"""Rank groups: ``subject.ranks(n)`` starts n subject sandboxes (ranks), each with its own
handle table, and calls them all at once (docs/probe-protocol.md "Rank groups").

    with subject.ranks(2) as group:
        out = group.call_all("mypkg.dist", "exchange", [(4096,), (4096,)])   # one list
        model = group[1].module("mypkg").Model()      # a handle living in rank 1
        group.last_subject_ns                         # each rank's time in the last call

The broker measures each rank from outside (time, memory, bytes sent) and holds the test's
``rank_bytes`` budget against the largest. A fault on any rank ends the whole group: the
exception (``SubjectCrashed``, ``SubjectTimeout``...) carries the rank as ``exc.rank``.
"""

from . import _core
from ._core import (
    _FAULTS,
    _NO_KWARGS,
    _REF,
    _VALUE,
    Client,
    Handle,
    Method,
    ModuleProxy,
    _target,
    client,
    wire,
)
from ._endpoint import Endpoint
from ._errors import ProtocolError, StaleHandle

MIN_WORLD_SIZE = 2
MAX_WORLD_SIZE = 4
_FAULT_TEXT = {
    "timeout": "did not answer in time",
    "crashed": "died during the call",
    "oom": "ran out of memory",
    "budget": "the test's subject time ran past its time budget",
    "protocol": "broke the protocol",
}


class RankClient(Client):
    """One rank's handle table; its requests travel on the judge's one connection."""

    def __init__(self, main, group, rank):  # no socket of its own: Client.__init__ is not run
        self.main = main
        self.group = group
        self.sock = None
        self.fault = None
        self.next_id = None
        self.stack = []
        self.in_callback = 0
        self.busy = 0
        self.deferred = False
        self.on_deferred = None
        self.last_fault = None
        self.last_subject_ns = None
        self.subject_ns = 0
        self.calls = 0
        self.rank = rank
        self.groups = {}
        self.codec = wire.Codec(
            encode_object=self._encode_object,
            decode_ref=self._decode_ref,
            decode_callback=None,
            tensor_device="available",
            extra_types=(Handle, Method, ModuleProxy),
        )
        self._encode = self.codec.encode
        self._decode = self.codec.decode
        # Unique per rank, so nothing of one rank's table passes for another's.
        self._reset_generation((self.group.id, rank))

    def _encode_object(self, obj):
        if callable(obj) and not isinstance(obj, (Handle, Method)) and not (
                isinstance(obj, type) and issubclass(obj, _core.RemoteException)):
            raise TypeError("a judge callable cannot be sent to a rank")
        return Client._encode_object(self, obj)

    def sync(self):
        self.main.sync()
        if len(self.releases) >= _core._RELEASE_AT:
            self.flush_releases()

    def flush_releases(self):
        if not self.releases or not self.group.alive:
            return
        refs = list(self.releases)
        self.releases = {}
        self.call({"op": "release", "refs": refs}, _core._RAW)

    def call(self, req, kind=_VALUE, hint=None):
        __tracebackhide__ = True
        self.group._check()
        m = self.main
        if len(m.stack) > m.in_callback or len(self.releases) >= _core._RELEASE_AT:
            self.sync()
        msg = self.group._exchange({"op": "call", "rank": self.rank, "req": req})
        self.calls += 1
        ns = msg.get("subject_ns")
        if type(ns) is int:
            self.last_subject_ns = ns
            self.subject_ns += ns
        return self._result(msg, kind, hint)

    def _result(self, msg, kind, hint, envelope=("id", "subject_ns", "group")):
        """A rank's reply (exactly its ``ok`` or ``err`` and the broker's ``envelope``)."""
        __tracebackhide__ = True
        keys = set(msg)
        if keys == {"ok", *envelope}:
            return self._reply_value(msg["ok"], kind, hint)
        if keys == {"err", *envelope}:
            raise self.remote_error(msg["err"], hint)
        raise ProtocolError("not a reply")


class RankModuleProxy(ModuleProxy):
    """A module of one rank: imported on first use; stale once the group has ended."""

    __slots__ = ()

    def _infradev_r(self):
        c = self._infradev_c
        if self._infradev_ref is None:
            ref = c.call({"op": "import", "module": self._infradev_module}, _REF,
                         self._infradev_module)
            object.__setattr__(self, "_infradev_ref", ref)
            object.__setattr__(self, "_infradev_gen", c.generation)
            c.proxies[ref] = self
        elif self._infradev_gen != c.generation:
            raise StaleHandle("a handle of a rank group that has ended was used")
        return self._infradev_ref

    def __repr__(self):
        return "<rank %s module %s>" % (self._infradev_c.rank, self._infradev_module)

    __str__ = __repr__


class Rank(Endpoint):
    """One rank of a group: ``module``, ``put``, ``fetch``, ``call``... like ``subject``."""

    def __init__(self, client_):
        Endpoint.__init__(self)
        self._rank_client = client_

    def _client(self):
        return self._rank_client

    @property
    def rank(self):
        return self._rank_client.rank

    def module(self, name):
        if type(name) is not str or not name or name.startswith("."):
            raise ValueError("a module is named by its absolute dotted name")
        proxy = self._modules.get(name)
        if proxy is None:
            proxy = self._modules[name] = RankModuleProxy(self._rank_client, name)
        return proxy

    def __repr__(self):
        return "<rank %d>" % self.rank


class RankGroup:
    """``subject.ranks(n)``: a context manager; the group starts on entry, ends on exit."""

    def __init__(self, world_size):
        if type(world_size) is not int or not MIN_WORLD_SIZE <= world_size <= MAX_WORLD_SIZE:
            raise ValueError("a rank group has %d to %d ranks" % (MIN_WORLD_SIZE, MAX_WORLD_SIZE))
        self.world_size = world_size
        self.id = None
        self.alive = False
        self._main = None
        self._ranks = []
        self.last_subject_ns = None

    # ---- lifecycle ----------------------------------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        return False

    def start(self):
        __tracebackhide__ = True
        if self.alive:
            raise RuntimeError("the rank group is already running")
        self._main = m = client()
        msg = self._send(m, {"op": "ranks", "world_size": self.world_size})
        if "fault" in msg:
            raise self._fault(msg)
        gid = msg.get("group")
        if type(gid) is not int or msg.get("world_size") != self.world_size:
            raise ProtocolError("bad ranks reply")
        self.id = gid
        self.alive = True
        m.groups[gid] = self
        self._ranks = [Rank(RankClient(m, self, r)) for r in range(self.world_size)]
        return self

    def stop(self):
        """Ends the group (every rank's sandbox); its handles become stale."""
        if not self.alive:
            return
        self._ended()
        m = self._main
        try:
            self._send(m, {"op": "ranks", "world_size": 0})
        finally:
            m.groups.pop(self.id, None)

    def _ended(self):
        self.alive = False
        for r in self._ranks:
            r._rank_client._reset_generation(None)

    def _check(self):
        if not self.alive:
            raise StaleHandle("the rank group has ended")

    # ---- ranks --------------------------------------------------------------------------------

    def __len__(self):
        return self.world_size

    def __getitem__(self, rank):
        self._check()
        return self._ranks[rank]

    def __iter__(self):
        self._check()
        return iter(self._ranks)

    # ---- calls --------------------------------------------------------------------------------

    def call_all(self, module, function, args=None, kwargs=None):
        """``module.function(*args[r], **kwargs[r])`` on every rank r at once; the results in
        rank order. ``args``/``kwargs``: one tuple/dict per rank (None: no arguments). Raises
        the lowest rank's error if any rank raised."""
        __tracebackhide__ = True
        self._check()
        fns = [getattr(r.module(module), function) for r in self._ranks]
        return self.call_each(fns, args, kwargs)

    def call_same(self, module, function, *args, **kwargs):
        """``module.function(*args, **kwargs)`` on every rank at once."""
        __tracebackhide__ = True
        n = self.world_size
        return self.call_all(module, function, [args] * n, [kwargs] * n)

    def call_each(self, fns, args=None, kwargs=None):
        """``fns[r](*args[r], **kwargs[r])`` on every rank r at once, ``fns[r]`` a callable
        handle (or method) of rank r."""
        __tracebackhide__ = True
        self._check()
        n = self.world_size
        args = [()] * n if args is None else list(args)
        kwargs = [{}] * n if kwargs is None else list(kwargs)
        if len(fns) != n or len(args) != n or len(kwargs) != n:
            raise ValueError("one callable, one argument tuple and one kwargs dict per rank")
        reqs, hints = [], []
        for r, rank in enumerate(self._ranks):
            c = rank._rank_client
            req, hint = _target(fns[r], c)
            try:
                req["args"] = c._encode(list(args[r])) if args[r] else []
                req["kwargs"] = c._encode(dict(kwargs[r])) if kwargs[r] else _NO_KWARGS
            finally:
                c.keepalive.clear()
            reqs.append(req)
            hints.append(hint)
        if len(self._main.stack) > self._main.in_callback:
            self._main.sync()
        msg = self._exchange({"op": "call_ranks", "reqs": reqs})
        replies = msg.get("ranks")
        if type(replies) is not list or len(replies) != n:
            raise ProtocolError("bad call_ranks reply")
        out, errors, times = [], [], []
        for r, (rank, reply) in enumerate(zip(self._ranks, replies)):
            if type(reply) is not dict:
                raise ProtocolError("bad call_ranks reply")
            ns = reply.get("subject_ns")
            times.append(ns if type(ns) is int else None)
            try:
                out.append(rank._rank_client._result(reply, _VALUE, hints[r], ("subject_ns",)))
            except ProtocolError:
                raise
            except Exception as e:  # the rank raised: reported after every reply is read
                out.append(None)
                errors.append(e)
        self.last_subject_ns = times
        if errors:
            raise errors[0]
        return out

    # ---- the wire -----------------------------------------------------------------------------

    def _exchange(self, body):
        """Sends one group request on the judge's connection; returns its reply (a fault
        ends the group and is raised)."""
        __tracebackhide__ = True
        self._check()
        msg = self._send(self._main, body)
        if "fault" in msg:
            self._ended()
            raise self._fault(msg)
        return msg

    def _send(self, m, body):
        __tracebackhide__ = True
        n = m.next_id
        m.next_id = n + 1
        frame = dict(body)
        frame["id"] = n
        try:
            packed = _core.wire.pack(frame, _core.wire.MAX_FRAME)
        except _core.wire.NotEncodable:
            raise ValueError("the request is larger than a frame may be") from None
        m.busy += 1
        try:
            m._send(packed)
            m.stack.append(n)
            msg = m._read()
            if msg is None:
                raise ProtocolError("the broker closed the connection")
            if msg.get("id") != n or "group" not in msg:
                raise ProtocolError("a reply to another call")
            m.stack.pop()
        finally:
            m._leave()
        return msg

    def _fault(self, msg):
        name = msg.get("fault")
        if name == "refused":
            return ValueError("the broker refused the rank request")
        if name == "no_group":
            self._ended()
            return StaleHandle("the rank group has ended")
        if name == "unavailable":
            return ProtocolError("the broker could not start the rank group")
        cls = _FAULTS.get(name, ProtocolError)
        rank = msg.get("rank")
        exc = cls("rank %s %s; the group has ended"
                  % (rank if type(rank) is int else "?",
                     _FAULT_TEXT.get(name, "faulted")))
        exc.rank = rank if type(rank) is int else None
        return exc

    def __repr__(self):
        return "<rank group of %d%s>" % (self.world_size, "" if self.alive else ", ended")
