"""InfraDev pytest plugin: structured results, budgets and per-test timeouts.

Loaded with ``-p infradev_pytest`` (``runners/python`` on ``PYTHONPATH``); see docs/grading.md for
the contract. Standard library only; works with Debian bookworm's pytest 7.2 / pluggy 1.0 and
later releases.

Environment:

``INFRADEV_SPEC``
    Path of the phase spec (JSON): ``test_timeout_s`` and ``budgets`` keyed by pytest node id
    (``peak_memory_mb``, ``wall_time_s``, ``collective_calls``, ``collective_bytes``; each
    optional). A key without a ``[param]`` suffix also applies to every parametrisation.
``INFRADEV_EVENTS_SOCKET``
    The grader's Unix socket. Every event is one frame (4-byte big-endian length, JSON), sent
    at once, so a test that started but has no ``result`` was in flight when the sandbox died.
    Which of the collected tests count is decided by the grader from the results: the sandbox
    never learns the list of expected ids.

What is measured (only for tests that declare the matching budget, and only around the test
function itself, not its fixtures):

* ``wall_time_s``: ``time.perf_counter()`` around the call.
* ``peak_memory_mb``: the ``tracemalloc`` peak of the call (MiB); when torch is imported and CUDA
  is initialised, ``torch.cuda.max_memory_allocated`` is read too and the larger value counts.
* ``collective_calls`` / ``collective_bytes``: the ``torch.distributed`` collectives and
  point-to-point calls made by the test process, wrapped for the duration of the call. Bytes are
  the size of the local payload of each call (the tensor reduced, broadcast, sent or received;
  the input of gathers, scatters and all-to-alls); ``barrier`` counts as a call of 0 bytes.

Timeouts: each of setup, call and teardown is interrupted after ``test_timeout_s`` with
``TestTimeout`` (SIGALRM; re-fired every second until the test gives up, so a broad ``except``
cannot swallow it). The call of a test with a ``wall_time_s`` budget is interrupted already at
``min(test_timeout_s, 2 * budget + 1)`` with ``TimeBudgetExceeded``.
"""

import functools
import inspect
import json
import os
import socket
import struct
import sys
import threading
import time
import tracemalloc
import warnings

import pytest

from infradev_guard import Alarm, TimeoutEscalation, guard_phase, unwrap

__all__ = [
    "BudgetExceeded",
    "MemoryBudgetExceeded",
    "TimeBudgetExceeded",
    "TrafficBudgetExceeded",
    "TestTimeout",
]

MESSAGE_LIMIT = 2000
_MIB = 1024.0 * 1024.0


# --------------------------------------------------------------------------------------------
# Exceptions


class BudgetExceeded(AssertionError):
    """A declared budget (or the per-test timeout) was exceeded."""

    kind = None  # "memory" | "time" | "traffic"; None for TestTimeout

    def __init__(self, message, measured=None, limit=None):
        super().__init__(message)
        self.measured = measured
        self.limit = limit

    @property
    def budget(self):
        if self.kind is None or self.measured is None or self.limit is None:
            return None
        return {"kind": self.kind, "measured": self.measured, "limit": self.limit}


class MemoryBudgetExceeded(BudgetExceeded):
    kind = "memory"


class TimeBudgetExceeded(BudgetExceeded):
    kind = "time"


class TrafficBudgetExceeded(BudgetExceeded):
    kind = "traffic"


class TestTimeout(BudgetExceeded):
    """The hard per-test timeout (``test_timeout_s``) ran out."""

    __test__ = False  # not a test class, whatever the collection rules
    kind = None


# --------------------------------------------------------------------------------------------
# Small helpers


def _clean_text(text, limit=MESSAGE_LIMIT):
    if text is None:
        return None
    text = str(text)
    if len(text) > limit:
        text = text[:limit]
    # No lone surrogates in the JSON we write (strict JSON readers reject them).
    return text.encode("utf-8", "replace").decode("utf-8")


def _qualname(exc_type):
    name = getattr(exc_type, "__qualname__", None) or getattr(exc_type, "__name__", "?")
    module = getattr(exc_type, "__module__", None)
    if not module or module == "builtins":
        return name
    return "%s.%s" % (module, name)


def _exc_message(exc):
    if type(exc).__name__ == "FixtureLookupError":
        msg = getattr(exc, "msg", None)
        return msg or "fixture %r not found" % (getattr(exc, "argname", None),)
    try:
        return str(exc)
    except BaseException:  # a broken __str__ must not break the report
        try:
            return repr(exc)
        except BaseException:
            return "<unprintable %s>" % type(exc).__name__


def _describe(exc):
    exc = unwrap(exc)
    return {
        "exc_type": _qualname(type(exc)),
        "message": _clean_text(_exc_message(exc)),
        "budget": getattr(exc, "budget", None) if isinstance(exc, BudgetExceeded) else None,
    }


def _longrepr_message(report):
    """Fallback when no exception object is at hand: the last meaningful line of the report."""
    longrepr = report.longrepr
    if longrepr is None:
        return None
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip: (path, lineno, reason)
        return _clean_text(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return _clean_text(crash.message)
    lines = [l.strip() for l in str(longrepr).splitlines() if l.strip()]
    return _clean_text(lines[-1]) if lines else None


def _num(value):
    """A limit for messages and events: integral values as int (5, not 5.0 or 1.04858e+06)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    return value


def _positive(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


# --------------------------------------------------------------------------------------------
# Events


class _Events:
    """The results channel: length-prefixed JSON frames on the grader's Unix socket
    (``INFRADEV_EVENTS_SOCKET``). The grader keeps what arrives as it arrives, so nothing sent
    can be taken back; with no socket configured (the plugin's own self-test) nothing is sent."""

    def __init__(self, path, file_path=None):
        self.path = path
        self.file_path = file_path  # INFRADEV_EVENTS: a JSON-lines file, for the self-test only
        self.sock = None
        self.lock = threading.Lock()

    def emit(self, **event):
        body = json.dumps(event, ensure_ascii=False, allow_nan=False, default=str)
        data = body.encode("utf-8", "replace")
        if self.file_path and not self.path:
            with self.lock, open(self.file_path, "ab") as f:
                f.write(data + b"\n")
            return
        if not self.path:
            return
        with self.lock:
            try:
                if self.sock is None:
                    self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    self.sock.connect(self.path)
                self.sock.sendall(struct.pack(">I", len(data)) + data)
            except OSError:
                # The grader is gone or refused the frame; it judges from what it has.
                self.sock = None

    def close(self):
        with self.lock:
            if self.sock is not None:
                self.sock.close()
                self.sock = None


# --------------------------------------------------------------------------------------------
# Spec


class _Spec:
    def __init__(self, data):
        self.test_timeout_s = _positive(data.get("test_timeout_s"))
        self.budgets = {}
        for nodeid, budget in (data.get("budgets") or {}).items():
            budget = budget or {}
            self.budgets[nodeid] = {
                "peak_memory_mb": _positive(budget.get("peak_memory_mb")),
                "wall_time_s": _positive(budget.get("wall_time_s")),
                "collective_calls": _positive(budget.get("collective_calls")),
                "collective_bytes": _positive(budget.get("collective_bytes")),
            }

    @classmethod
    def load(cls):
        path = os.environ.get("INFRADEV_SPEC")
        if not path:
            return cls({})
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if not isinstance(data, dict):
                raise ValueError("the spec is not a JSON object")
            return cls(data)
        except (OSError, ValueError) as e:
            raise pytest.UsageError("infradev_pytest: cannot read INFRADEV_SPEC %s: %s" % (path, e))

    def budget_for(self, nodeid):
        budget = self.budgets.get(nodeid)
        if budget is None and nodeid.endswith("]") and "[" in nodeid:
            budget = self.budgets.get(nodeid[: nodeid.index("[")])
        if budget is None or not any(v is not None for v in budget.values()):
            return None
        return budget


# --------------------------------------------------------------------------------------------
# Timeouts (SIGALRM)


# --------------------------------------------------------------------------------------------
# Collective traffic (torch.distributed)

# name -> (position, keyword) of the local payload; (None, None): no payload.
_COLLECTIVES = {
    "all_reduce": (0, "tensor"),
    "all_gather": (1, "tensor"),
    "all_gather_into_tensor": (1, "input_tensor"),
    "reduce_scatter": (1, "input_list"),
    "reduce_scatter_tensor": (1, "input"),
    "broadcast": (0, "tensor"),
    "reduce": (0, "tensor"),
    "gather": (0, "tensor"),
    "scatter": (0, "tensor"),
    "all_to_all": (1, "input_tensor_list"),
    "all_to_all_single": (1, "input"),
    "send": (0, "tensor"),
    "recv": (0, "tensor"),
    "isend": (0, "tensor"),
    "irecv": (0, "tensor"),
    "barrier": (None, None),
    "batch_isend_irecv": (0, "p2p_op_list"),
}


def _nbytes(obj, depth=0):
    if obj is None or depth > 4:
        return 0
    numel = getattr(obj, "numel", None)
    element_size = getattr(obj, "element_size", None)
    if callable(numel) and callable(element_size):
        try:
            return int(numel()) * int(element_size())
        except Exception:
            return 0
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o, depth + 1) for o in obj)
    tensor = getattr(obj, "tensor", None)  # torch.distributed.P2POp
    if tensor is not None:
        return _nbytes(tensor, depth + 1)
    return 0


class _TrafficMeter:
    def __init__(self):
        self.calls = 0
        self.bytes = 0
        self.local = threading.local()
        self.patched = []  # (module, name, original)

    def install(self):
        __tracebackhide__ = True
        try:
            import torch.distributed as dist
        except Exception as e:
            raise RuntimeError(
                "a collective_calls/collective_bytes budget is declared but cannot be measured: "
                "torch.distributed is not importable (%s: %s)" % (type(e).__name__, e)
            )
        modules = [dist]
        c10d = getattr(dist, "distributed_c10d", None)
        if c10d is not None:
            modules.append(c10d)
        for module in modules:
            for name, where in _COLLECTIVES.items():
                original = module.__dict__.get(name)
                if original is None or not callable(original):
                    continue
                module.__dict__[name] = self._wrap(original, where)
                self.patched.append((module, name, original))
        if not self.patched:
            raise RuntimeError(
                "a collective_calls/collective_bytes budget is declared but cannot be measured: "
                "this torch build has no torch.distributed collectives"
            )

    def _wrap(self, original, where):
        meter = self
        position, keyword = where

        @functools.wraps(original)
        def counted(*args, **kwargs):
            depth = getattr(meter.local, "depth", 0)
            if depth == 0:  # count the outermost call only (collectives calling collectives)
                meter.calls += 1
                if position is not None:
                    payload = kwargs.get(keyword) if keyword in kwargs else (
                        args[position] if len(args) > position else None)
                    meter.bytes += _nbytes(payload)
            meter.local.depth = depth + 1
            try:
                return original(*args, **kwargs)
            finally:
                meter.local.depth = depth

        return counted

    def uninstall(self):
        while self.patched:
            module, name, original = self.patched.pop()
            module.__dict__[name] = original


# --------------------------------------------------------------------------------------------
# Memory


def _cuda_initialized():
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch
    except Exception:
        pass
    return None


class _MemoryMeter:
    def __init__(self):
        self.stop_tracing = False
        self.baseline = 0

    def start(self):
        torch = _cuda_initialized()
        if torch is not None:
            for device in range(torch.cuda.device_count()):
                try:
                    torch.cuda.reset_peak_memory_stats(device)
                except Exception:
                    pass
        if tracemalloc.is_tracing():
            tracemalloc.reset_peak()
            self.baseline = tracemalloc.get_traced_memory()[0]
        else:
            tracemalloc.start()
            self.stop_tracing = True
            self.baseline = 0

    def stop(self):
        """Peak in MiB."""
        peak = 0
        if tracemalloc.is_tracing():
            peak = max(0, tracemalloc.get_traced_memory()[1] - self.baseline)
            if self.stop_tracing:
                tracemalloc.stop()
        torch = _cuda_initialized()
        if torch is not None:
            for device in range(torch.cuda.device_count()):
                try:
                    peak = max(peak, int(torch.cuda.max_memory_allocated(device)))
                except Exception:
                    pass
        return peak / _MIB


# --------------------------------------------------------------------------------------------
# Per-test records and plugin state


class _Record:
    def __init__(self):
        self.failure = None  # (when, description)
        self.skip = None  # (when, message)
        self.duration = 0.0
        self.measurements = {}


class _State:
    def __init__(self, config, spec, events):
        self.config = config
        self.spec = spec
        self.events = events
        self.alarm = Alarm()
        self.records = {}
        self.described = {}  # (nodeid, when) -> description, from pytest_runtest_makereport
        self.collect_described = {}  # collector nodeid -> description

    def record(self, nodeid):
        rec = self.records.get(nodeid)
        if rec is None:
            rec = self.records[nodeid] = _Record()
        return rec


_state = None  # set in pytest_configure
_early_events = None  # before pytest_configure (conftest import failures)


def _events():
    global _early_events
    if _state is not None:
        return _state.events
    if _early_events is None:
        _early_events = _Events(os.environ.get("INFRADEV_EVENTS_SOCKET"), os.environ.get("INFRADEV_EVENTS"))
    return _early_events


# --------------------------------------------------------------------------------------------
# Hooks: configuration and session


@pytest.hookimpl(hookwrapper=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # A conftest.py that fails to import ends pytest before the session starts (exit 4); record
    # it, as a collection error of that conftest.
    outcome = yield
    exc = outcome.excinfo[1] if outcome.excinfo else None
    if exc is not None and type(exc).__name__ == "ConftestImportFailure":
        try:
            path = os.path.relpath(str(exc.path), str(early_config.rootpath)).replace(os.sep, "/")
        except Exception:
            path = str(getattr(exc, "path", ""))
        d = _describe(exc)
        _events().emit(event="collect_error", path=path, exc_type=d["exc_type"], message=d["message"])


def pytest_configure(config):
    global _state
    _state = _State(config, _Spec.load(), _events())


def pytest_unconfigure(config):
    global _state
    if _state is not None:
        _state.alarm.disarm()
        _state.events.close()
        _state = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    # Marks that pytest and this plugin came up: a results file without it means the sandbox
    # never got as far as running pytest (our fault), not that the code under test failed.
    if _state is not None:
        _state.events.emit(event="session_start")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if _state is not None:
        _state.events.emit(event="finish", exitstatus=int(exitstatus))


# --------------------------------------------------------------------------------------------
# Hooks: collection


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_make_collect_report(collector):
    outcome = yield
    if _state is None or outcome.excinfo:
        return
    report = outcome.get_result()
    call = getattr(report, "call", None) or report.__dict__.get("call")
    if report.failed and call is not None and call.excinfo is not None:
        d = _describe(call.excinfo.value)
        inner = call.excinfo.value
        if type(inner).__name__ == "ConftestImportFailure":
            try:
                d["path"] = os.path.relpath(str(inner.path), str(_state.config.rootpath)).replace(os.sep, "/")
            except Exception:
                pass
        if "path" not in d:
            try:
                d["fallback_path"] = os.path.relpath(str(collector.path), str(_state.config.rootpath)).replace(os.sep, "/")
            except Exception:
                pass
        _state.collect_described[report.nodeid] = d


def pytest_collectreport(report):
    if _state is None or not report.failed:
        return
    d = _state.collect_described.pop(report.nodeid, None) or {}
    path = d.get("path") or report.nodeid.split("::")[0] or d.get("fallback_path") or ""
    _state.events.emit(
        event="collect_error",
        path=path,
        exc_type=d.get("exc_type"),
        message=d["message"] if "message" in d else _longrepr_message(report),
    )


# --------------------------------------------------------------------------------------------
# Hooks: running a test


def pytest_runtest_logstart(nodeid, location):
    if _state is None:
        return
    _state.records[nodeid] = _Record()
    _state.events.emit(event="start", nodeid=nodeid)


def _guard_phase(item, when):
    """Body of the setup/call/teardown hookwrappers (infradev_guard.guard_phase)."""
    state = _state
    timeout = state.spec.test_timeout_s if state is not None else None
    alarm = state.alarm if state is not None else None
    return guard_phase(alarm, timeout, lambda: TestTimeout(
        "test %s exceeded the %s s timeout" % (when, _num(timeout)), measured=timeout, limit=timeout), when)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    yield from _guard_phase(item, "setup")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    yield from _guard_phase(item, "call")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    yield from _guard_phase(item, "teardown")


def _is_async(function):
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    __tracebackhide__ = True
    state = _state
    testfunction = pyfuncitem.obj
    if state is None or _is_async(testfunction):
        return None  # async tests: left to whichever plugin runs them, unmeasured
    funcargs = pyfuncitem.funcargs
    testargs = {arg: funcargs[arg] for arg in pyfuncitem._fixtureinfo.argnames}
    budget = state.spec.budget_for(pyfuncitem.nodeid) or {}
    record = state.record(pyfuncitem.nodeid)

    mem_limit = budget.get("peak_memory_mb")
    time_limit = budget.get("wall_time_s")
    calls_limit = budget.get("collective_calls")
    bytes_limit = budget.get("collective_bytes")
    timeout = state.spec.test_timeout_s

    traffic = None
    if calls_limit is not None or bytes_limit is not None:
        traffic = _TrafficMeter()
        traffic.install()  # RuntimeError when torch.distributed is missing
    memory = _MemoryMeter() if mem_limit is not None else None

    started = [time.perf_counter()]

    def elapsed():
        return time.perf_counter() - started[0]

    alarm = state.alarm
    if time_limit is not None:
        limit = 2 * time_limit + 1
        seconds = min(timeout, limit) if timeout else limit
        if timeout is not None and timeout <= time_limit:
            make_exc = lambda: TestTimeout(
                "test call exceeded the %s s timeout" % _num(timeout), measured=timeout, limit=timeout)
        else:
            make_exc = lambda: TimeBudgetExceeded(
                "wall time %.3f s exceeds the budget of %s s (interrupted)" % (elapsed(), _num(time_limit)),
                measured=round(elapsed(), 6), limit=time_limit)
        alarm.arm(seconds, make_exc)
    else:
        alarm.arm(timeout, lambda: TestTimeout(
            "test call exceeded the %s s timeout" % _num(timeout), measured=timeout, limit=timeout))

    result = None
    escalated = False
    try:
        if memory is not None:
            memory.start()
        started[0] = time.perf_counter()
        result = testfunction(**testargs)
    except TimeoutEscalation:
        escalated = True
    finally:
        wall = elapsed()
        fired = alarm.fired
        alarm.disarm()
        alarm.fired = None
        if isinstance(fired, TimeBudgetExceeded):
            fired.measured = round(wall, 6)
        if traffic is not None:
            traffic.uninstall()
        peak = memory.stop() if memory is not None else None
        if peak is not None:
            record.measurements["peak_memory_mb"] = round(peak, 3)
        if time_limit is not None:
            record.measurements["wall_time_s"] = round(wall, 6)
        if traffic is not None:
            record.measurements["collective_calls"] = traffic.calls
            record.measurements["collective_bytes"] = traffic.bytes

    if fired is not None:  # the test swallowed the timer's exception (escalated or returned)
        raise fired
    if escalated:  # cannot happen without a fired alarm; never pass a test silently
        raise TestTimeout("test call exceeded its timeout")
    if mem_limit is not None and peak > mem_limit:
        raise MemoryBudgetExceeded(
            "peak memory %.1f MB exceeds the budget of %s MB" % (peak, _num(mem_limit)),
            measured=round(peak, 3), limit=mem_limit)
    if time_limit is not None and wall > time_limit:
        raise TimeBudgetExceeded(
            "wall time %.3f s exceeds the budget of %s s" % (wall, _num(time_limit)),
            measured=round(wall, 6), limit=time_limit)
    if calls_limit is not None and traffic.calls > calls_limit:
        raise TrafficBudgetExceeded(
            "%d collective calls exceed the budget of %s" % (traffic.calls, _num(calls_limit)),
            measured=traffic.calls, limit=_num(calls_limit))
    if bytes_limit is not None and traffic.bytes > bytes_limit:
        raise TrafficBudgetExceeded(
            "%d collective bytes exceed the budget of %s" % (traffic.bytes, _num(bytes_limit)),
            measured=traffic.bytes, limit=_num(bytes_limit))

    if hasattr(result, "__await__") or hasattr(result, "__aiter__"):
        # What pytest does itself for an awaitable result without an async plugin.
        try:
            from _pytest.python import async_warn_and_skip as unsupported
        except ImportError:  # pytest >= 8.4
            from _pytest.python import async_fail as unsupported
        unsupported(pyfuncitem.nodeid)
    elif result is not None:
        warning = getattr(pytest, "PytestReturnNotNoneWarning", pytest.PytestWarning)
        warnings.warn(warning(
            "Expected None, but %s returned %r, which will be an error in a future version of "
            "pytest.  Did you mean to use `assert` instead of `return`?" % (pyfuncitem.nodeid, result)))
    return True


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if _state is None or outcome.excinfo:
        return
    if call.excinfo is not None:
        _state.described[(item.nodeid, call.when)] = _describe(call.excinfo.value)


def pytest_runtest_logreport(report):
    if _state is None:
        return
    rec = _state.record(report.nodeid)
    rec.duration += float(getattr(report, "duration", 0.0) or 0.0)
    if report.failed and rec.failure is None:
        d = _state.described.pop((report.nodeid, report.when), None)
        if d is None:  # e.g. a strict XPASS: failed without an exception
            d = {"exc_type": None, "message": _longrepr_message(report), "budget": None}
        rec.failure = (report.when, d)
    elif report.skipped and rec.skip is None:
        rec.skip = (report.when, _longrepr_message(report) if not hasattr(report, "wasxfail")
                    else _clean_text(("xfail: %s" % report.wasxfail) if report.wasxfail else "xfail"))
    _state.described.pop((report.nodeid, report.when), None)


def pytest_runtest_logfinish(nodeid, location):
    if _state is None:
        return
    rec = _state.records.pop(nodeid, None) or _Record()
    for key in [k for k in _state.described if k[0] == nodeid]:
        del _state.described[key]
    event = {"event": "result", "nodeid": nodeid}
    if rec.failure is not None:
        when, d = rec.failure
        event.update(when=when, outcome="failed", exc_type=d.get("exc_type"), message=d.get("message"))
        budget = d.get("budget")
    elif rec.skip is not None:
        when, message = rec.skip
        event.update(when=when, outcome="skipped", exc_type=None, message=message)
        budget = None
    else:
        event.update(when="call", outcome="passed", exc_type=None, message=None)
        budget = None
    event["duration_s"] = round(rec.duration, 6)
    event["measurements"] = rec.measurements
    event["budget"] = budget
    _state.events.emit(**event)
