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
"""

from ._api import Batch, BatchItem, Subject, subject
from ._core import Handle, Method, ModuleProxy
from ._ranks import Rank, RankGroup
from ._seed import workload_seed
from ._errors import (
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
    "workload_seed",
    "Subject",
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
]
