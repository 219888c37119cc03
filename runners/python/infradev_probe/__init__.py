"""The probe library: the judge's only way to reach the submission (docs/probe-protocol.md,
docs/tasks-format.md "The probe library").

    from infradev_probe import subject

    minicache = subject.module("minicache")
    alloc = minicache.BlockAllocator(num_blocks=32, block_size=4)   # a handle
    table = alloc.allocate(0, [1, 2, 3])                            # a list, by value
    with pytest.raises(minicache.NoFreeBlocksError):
        alloc.allocate(1, list(range(1000)))

The submission runs in another sandbox (the subject); every operation on a handle is a request
relayed by the broker. Nothing of the submission is imported or executed here.

The judge decides on data only: values cross by value and are compared here; an operator on a
handle (``==``, ``<``, ``in``, ``len``, ``bool``, ``hash``, iteration, arithmetic...) raises
HandleOperatorError instead of asking the submission's own code. Fetch the value
(``subject.fetch(h)``), or ask explicitly with ``subject_op(h, "__eq__", x)``, an answer that
must never decide a probe.
"""

from ._api import Subject, subject
from ._batch import Batch, BatchItem
from ._core import Handle, Method, ModuleProxy, subject_op
from ._endpoint import Endpoint
from ._ranks import Rank, RankGroup
from ._seed import workload_seed
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

__all__ = [
    "subject",
    "subject_op",
    "workload_seed",
    "Subject",
    "Endpoint",
    "Batch",
    "BatchItem",
    "Handle",
    "Method",
    "ModuleProxy",
    "Rank",
    "RankGroup",
    "SubjectError",
    "RemoteException",
    "SubjectFault",
    "SubjectCrashed",
    "SubjectTimeout",
    "TimeBudgetExceeded",
    "SubjectOutOfMemory",
    "StaleHandle",
    "ProtocolError",
    "NotEncodable",
    "HandleOperatorError",
]
