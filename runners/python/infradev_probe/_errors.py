"""The judge's exception types. Every message is composed here, from names the judge chose
(attribute names it asked for, allow-listed builtin names): never text from the subject."""

from ._wire import wire

ProtocolError = wire.ProtocolError


class SubjectError(Exception):
    """The subject raised. The instance is also an instance of the allow-listed builtin base
    (``KeyError``...) and of the stand-ins of the remote exception classes it matches, so
    ``pytest.raises(KeyError)`` and ``pytest.raises(mod.SomeError)`` work. ``builtin`` is the
    builtin base's name (or None)."""

    builtin = None


class RemoteException(SubjectError):
    """Base of the local stand-ins for the subject's exception classes."""

    _infradev_ref = None
    _infradev_gen = None


class NotEncodable(wire.NotEncodable, TypeError):
    """``subject.fetch`` of an object that cannot cross by value."""


class HandleOperatorError(TypeError):
    """An operator (``==``, ``<``, ``in``, ``len``, ``bool``, ``hash``, iteration, arithmetic,
    ``int``...) used on a handle. The judge decides on data only: an operator on a handle would
    run the submission's own code on the judge's value (``x == 8`` asking the subject whether it
    equals 8), so it is never forwarded. Fetch the value (``subject.fetch(h)``) and use that, or,
    for the subject's own answer (which must never decide a probe),
    ``infradev_probe.subject_op(h, "__eq__", 8)``. A ``TypeError``, as Python raises for an
    operator a type does not support."""

    def __init__(self, name, symbol=None):
        self.operator = name
        what = "%s (%s)" % (symbol, name) if symbol else name
        TypeError.__init__(
            self,
            "%s on a handle is not forwarded to the subject: the judge decides on data only. "
            "Fetch the value (subject.fetch(handle)) and use that; for the subject's own answer, "
            "which must never decide a probe, call infradev_probe.subject_op(handle, %r, ...)"
            % (what, name))


class SubjectFault(BaseException):
    """The subject is gone (the broker replaced it). Not an ``Exception``, so a probe's
    ``except Exception`` or ``pytest.raises(Exception)`` cannot take it for an expected error."""


class SubjectCrashed(SubjectFault):
    """The subject died during the call."""


class SubjectTimeout(SubjectFault):
    """The call ran past its deadline; the broker ended the subject."""


class TimeBudgetExceeded(SubjectTimeout):
    """The test's subject time ran past twice its ``wall_time_s`` budget plus 1 s."""


class SubjectOutOfMemory(SubjectFault):
    """The subject was killed for memory."""


class StaleHandle(SubjectFault):
    """A handle from an earlier subject (one that died) was used."""
