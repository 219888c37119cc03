"""The judge's pytest plugin: lifecycle events to the broker, and the per-test timeout.

Loaded with ``-p infradev_probe.plugin`` in the judge sandbox (docs/probe-protocol.md). It
connects to the broker (``INFRADEV_BROKER``), says hello, and reports ``session_start``,
``collect_error {path, exc_type}``, ``start {nodeid}`` (then waits for the broker's
``started``: the test runs only once measurement is armed), ``result {nodeid, when, outcome,
exc_type}`` and ``finish {exitstatus}``. ``exc_type`` is always a name of the broker's allow-list;
no message, no traceback, no free text is ever sent. The broker writes the results.

Environment:

``INFRADEV_BROKER``
    The judge's socket (``/infradev/broker/judge.sock``).
``INFRADEV_TEST_TIMEOUT_S``
    Hard limit for each of a test's setup, call and teardown, applied with SIGALRM as the
    official phase's plugin does (re-fired every second, escalating to a ``BaseException``
    when the test swallows it). While a request to the subject is on the wire the alarm is
    deferred to its reply, so a frame is never cut in half; the broker bounds each call.
``INFRADEV_SELECT``
    Optional JSON list of the node ids to run (a name without ``[params]`` selects all its
    cases); everything else collected from the files named on the command line is deselected.
``INFRADEV_SPEC``
    Optional phase spec (JSON) read for ``test_timeout_s`` and ``select`` when the variables
    above are not set.
"""

import builtins
import json
import os

import pytest
from infradev_guard import Alarm, TimeoutEscalation, guard_phase, unwrap

from . import _core
from ._errors import (
    StaleHandle,
    SubjectCrashed,
    SubjectError,
    SubjectOutOfMemory,
    SubjectTimeout,
)
from ._wire import wire

__all__ = ["TestTimeout"]

# The exception names the broker accepts in events (docs/probe-protocol.md).
EVENT_EXC_TYPES = frozenset(
    """AssertionError infradev.SubjectError infradev.SubjectCrashed infradev.SubjectTimeout
    infradev.SubjectOutOfMemory infradev.StaleHandle infradev.ProtocolError infradev.TestTimeout
    infradev.Skipped infradev.FixtureError TypeError ValueError KeyError IndexError
    AttributeError NotImplementedError RuntimeError ImportError ModuleNotFoundError SyntaxError
    NameError ZeroDivisionError OverflowError RecursionError MemoryError OSError""".split()
)
_LOCAL = {getattr(builtins, n): n for n in EVENT_EXC_TYPES if "." not in n}


class TestTimeout(AssertionError):
    """The per-test timeout (``INFRADEV_TEST_TIMEOUT_S``) ran out."""

    __test__ = False
    _infradev_abandon = True  # raised inside a judge callback, it ends the call


def exc_type_of(exc):
    """The allow-listed name reported for an exception."""
    exc = unwrap(exc)
    if isinstance(exc, (TestTimeout, TimeoutEscalation)):
        return "infradev.TestTimeout"
    if isinstance(exc, SubjectTimeout):
        return "infradev.SubjectTimeout"
    if isinstance(exc, SubjectOutOfMemory):
        return "infradev.SubjectOutOfMemory"
    if isinstance(exc, SubjectCrashed):
        return "infradev.SubjectCrashed"
    if isinstance(exc, StaleHandle):
        return "infradev.StaleHandle"
    if isinstance(exc, wire.ProtocolError):
        return "infradev.ProtocolError"
    if isinstance(exc, SubjectError):
        builtin = getattr(exc, "builtin", None)
        return builtin if builtin in EVENT_EXC_TYPES else "infradev.SubjectError"
    name = type(exc).__name__
    if name == "FixtureLookupError":
        return "infradev.FixtureError"
    if isinstance(exc, pytest.skip.Exception):
        return "infradev.Skipped"
    for k in type(exc).__mro__:
        found = _LOCAL.get(k)
        if found is not None:
            return found
    return "AssertionError"


def _positive(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _settings():
    spec = {}
    path = os.environ.get("INFRADEV_SPEC")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                spec = json.load(f)
            if not isinstance(spec, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:
            raise pytest.UsageError("infradev_probe.plugin: cannot read INFRADEV_SPEC: %s" % e)
    timeout = _positive(os.environ.get("INFRADEV_TEST_TIMEOUT_S")) or _positive(
        spec.get("test_timeout_s"))
    select = spec.get("select")
    raw = os.environ.get("INFRADEV_SELECT")
    if raw:
        try:
            select = json.loads(raw)
        except ValueError:
            raise pytest.UsageError("infradev_probe.plugin: INFRADEV_SELECT is not JSON")
    if select is not None and not (isinstance(select, list)
                                   and all(isinstance(s, str) for s in select)):
        raise pytest.UsageError("infradev_probe.plugin: select is not a list of node ids")
    return timeout, (set(select) if select is not None else None)


# --------------------------------------------------------------------------------------------
# Timeouts (SIGALRM)


class _Alarm(Alarm):
    """The shared alarm, deferred while a request to the subject is on the wire: it fires at
    the end of that frame exchange, so a frame is never cut in half."""

    def defer(self):
        c = _core.current_client()
        if c is not None and c.busy:
            c.on_deferred = self.fire
            c.deferred = True
            return True
        return False

    def on_disarm(self):
        c = _core.current_client()
        if c is not None:
            c.deferred = False


# --------------------------------------------------------------------------------------------
# State


class _Record:
    def __init__(self):
        self.failure = None  # (when, exc_type)
        self.skip = None  # when


class _State:
    def __init__(self, config, client, timeout, select):
        self.config = config
        self.client = client
        self.timeout = timeout
        self.select = select
        self.alarm = _Alarm()
        self.records = {}
        self.described = {}  # (nodeid, when) -> exc_type
        self.collect_described = {}  # collector nodeid -> (path or None, exc_type)


_state = None


def _connect():
    c = _core.current_client()
    if c is None:
        path = os.environ.get("INFRADEV_BROKER")
        if not path:
            raise pytest.UsageError("infradev_probe.plugin: INFRADEV_BROKER is not set")
        c = _core.Client.connect(path)
        _core.set_client(c)
    return c


def _emit(**event):
    _connect().event(event)


# --------------------------------------------------------------------------------------------
# Hooks: configuration and session


@pytest.hookimpl(hookwrapper=True)
def pytest_load_initial_conftests(early_config, parser, args):
    outcome = yield
    exc = outcome.excinfo[1] if outcome.excinfo else None
    if exc is not None and type(exc).__name__ == "ConftestImportFailure":
        try:
            path = os.path.relpath(str(exc.path), str(early_config.rootpath)).replace(os.sep, "/")
        except Exception:
            path = str(getattr(exc, "path", ""))
        _emit(event="collect_error", path=path, exc_type=exc_type_of(exc))


def pytest_configure(config):
    global _state
    timeout, select = _settings()
    _state = _State(config, _connect(), timeout, select)


def pytest_unconfigure(config):
    global _state
    if _state is not None:
        _state.alarm.disarm()
        _state = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    if _state is not None:
        _emit(event="session_start")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if _state is not None:
        _emit(event="finish", exitstatus=int(exitstatus))


# --------------------------------------------------------------------------------------------
# Hooks: collection


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if _state is None or _state.select is None:
        return
    keep, drop = [], []
    for item in items:
        base = item.nodeid[: item.nodeid.index("[")] if item.nodeid.endswith("]") else item.nodeid
        selected = item.nodeid in _state.select or base in _state.select
        (keep if selected else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_make_collect_report(collector):
    outcome = yield
    if _state is None or outcome.excinfo:
        return
    report = outcome.get_result()
    call = getattr(report, "call", None) or report.__dict__.get("call")
    if report.failed and call is not None and call.excinfo is not None:
        inner = call.excinfo.value
        path = None
        if type(inner).__name__ == "ConftestImportFailure":
            try:
                path = os.path.relpath(str(inner.path), str(_state.config.rootpath)).replace(os.sep, "/")
            except Exception:
                path = None
        _state.collect_described[report.nodeid] = (path, exc_type_of(inner))


def pytest_collectreport(report):
    if _state is None or not report.failed:
        return
    path, exc_type = _state.collect_described.pop(report.nodeid, (None, "AssertionError"))
    path = path or report.nodeid.split("::")[0]
    _emit(event="collect_error", path=path, exc_type=exc_type)


# --------------------------------------------------------------------------------------------
# Hooks: running a test


def pytest_runtest_logstart(nodeid, location):
    if _state is None:
        return
    _state.records[nodeid] = _Record()
    _state.client.start(nodeid)


def _guard_phase(item, when):
    """Body of the setup/call/teardown hookwrappers (infradev_guard.guard_phase)."""
    state = _state
    timeout = state.timeout if state is not None else None
    alarm = state.alarm if state is not None else None
    return guard_phase(
        alarm, timeout, lambda: TestTimeout("test %s exceeded the timeout" % when), when)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    yield from _guard_phase(item, "setup")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    yield from _guard_phase(item, "call")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    yield from _guard_phase(item, "teardown")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if _state is None or outcome.excinfo:
        return
    if call.excinfo is not None:
        _state.described[(item.nodeid, call.when)] = exc_type_of(call.excinfo.value)


def pytest_runtest_logreport(report):
    if _state is None:
        return
    rec = _state.records.get(report.nodeid)
    if rec is None:
        rec = _state.records[report.nodeid] = _Record()
    described = _state.described.pop((report.nodeid, report.when), None)
    if report.failed and rec.failure is None:
        rec.failure = (report.when, described or "AssertionError")
    elif report.skipped and rec.skip is None:
        rec.skip = report.when


def pytest_runtest_logfinish(nodeid, location):
    if _state is None:
        return
    rec = _state.records.pop(nodeid, None) or _Record()
    for key in [k for k in _state.described if k[0] == nodeid]:
        del _state.described[key]
    if rec.failure is not None:
        when, exc_type = rec.failure
        outcome = "failed"
    elif rec.skip is not None:
        when, exc_type, outcome = rec.skip, "infradev.Skipped", "skipped"
    else:
        when, exc_type, outcome = "call", None, "passed"
    if exc_type is not None and exc_type not in EVENT_EXC_TYPES:
        exc_type = "AssertionError"
    _emit(event="result", nodeid=nodeid, when=when, outcome=outcome, exc_type=exc_type)
