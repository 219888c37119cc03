"""What both pytest plugins (the official phase's ``infradev_pytest`` and the judge's
``infradev_probe.plugin``) do the same way around each test: the per-phase timeout (SIGALRM),
KeyboardInterrupt or ``pytest.exit()`` from test code turned into that test's failure, and the
unwrapping of pytest's and our own exception wrappers. Standard library and pytest only.

The timeout re-fires every second until the test gives up: the first firing raises the armed
exception (an ``AssertionError`` subclass, a failure of the test); if the code under test
swallows it, the next one raises :class:`TimeoutEscalation`, a ``BaseException`` that
``except Exception`` no longer stops, and the test is failed with the first exception anyway.
"""

import signal
import threading

import pytest


class TimeoutEscalation(BaseException):
    """Raised by the alarm when code under test swallowed the first timeout exception: not an
    ``Exception``, so ``except Exception`` no longer stops it. Reported as the first one."""


class AbortedByTest(Exception):
    """Carries a KeyboardInterrupt or pytest.exit() raised by test code, so that pytest records
    it as this test's failure instead of ending the session. Reported as its ``__cause__``."""


def unwrap(exc):
    """The exception that really happened, behind pytest's and our own wrappers."""
    for _ in range(8):
        name = type(exc).__name__
        cause = exc.__cause__
        if isinstance(exc, AbortedByTest) and cause is not None:
            exc = cause
        elif name == "CollectError" and isinstance(cause, (ImportError, SyntaxError)):
            # pytest wraps import-time ImportError / SyntaxError of a test module.
            exc = cause
        elif name == "ConftestImportFailure":
            info = getattr(exc, "excinfo", None)
            inner = info[1] if info and len(info) > 1 else cause
            if inner is None:
                break
            exc = inner
        else:
            break
    return exc


class Alarm:
    """One ITIMER_REAL at a time; the handler raises the armed exception.

    Subclasses may defer a firing (:meth:`defer` returns True) and fire it later with
    :meth:`fire`; :meth:`on_disarm` runs when the timer is stopped.
    """

    def __init__(self):
        self.usable = hasattr(signal, "setitimer") and hasattr(signal, "SIGALRM")
        self.armed = False
        self.fired = None  # the exception raised when the timer went off
        self.make_exc = None
        self.previous = None

    def defer(self):
        """Whether a firing must wait (the subclass then calls :meth:`fire` itself)."""
        return False

    def on_disarm(self):
        """Called when the timer is stopped."""

    def _handler(self, signum, frame):
        __tracebackhide__ = True
        if not self.armed or self.defer():
            return
        self.fire()

    def fire(self):
        __tracebackhide__ = True
        if not self.armed:
            return
        if self.fired is not None:  # the first one was swallowed
            raise TimeoutEscalation()
        exc = self.make_exc()
        self.fired = exc
        raise exc

    def arm(self, seconds, make_exc):
        """Arm for ``seconds`` (None: only disarm). Returns whether a timer is now armed."""
        self.disarm()
        self.fired = None
        if not seconds or not self.usable:
            return False
        if threading.current_thread() is not threading.main_thread():
            return False
        self.make_exc = make_exc
        self.previous = signal.signal(signal.SIGALRM, self._handler)
        self.armed = True
        # Re-fire every second until disarmed, in case the code under test swallows it.
        signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
        return True

    def disarm(self):
        if not self.armed:
            return
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        self.on_disarm()
        try:
            signal.signal(signal.SIGALRM, self.previous if self.previous is not None else signal.SIG_DFL)
        except (TypeError, ValueError):
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
        self.previous = None


def guard_phase(alarm, timeout, make_exc, when):
    """Body of the setup/call/teardown hookwrappers (``yield from`` it): arms ``alarm`` for
    ``timeout`` seconds with ``make_exc()`` as the exception, and turns KeyboardInterrupt or
    ``pytest.exit()`` from test code into a failure of this test."""
    if alarm is not None:
        alarm.arm(timeout, make_exc)
    outcome = yield
    fired = None
    if alarm is not None:
        fired = alarm.fired
        alarm.disarm()
        alarm.fired = None
    exc = outcome.excinfo[1] if outcome.excinfo else None
    if exc is None or isinstance(exc, TimeoutEscalation):
        if fired is not None:  # the test swallowed the timeout; fail it anyway
            raise fired
        return
    if isinstance(exc, (KeyboardInterrupt, pytest.exit.Exception)):
        # Raising from the outermost wrapper's teardown replaces the exception (pluggy 1.0 has
        # no force_exception); pytest then records a failure instead of ending the session.
        raise AbortedByTest("%s raised in test %s" % (type(exc).__name__, when)) from exc
