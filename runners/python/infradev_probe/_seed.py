"""The seed of a probe's generated workload (docs/tasks.md, "Probe power")."""

import os
import zlib

SEED_ENV = "INFRADEV_PROBE_SEED"


def workload_seed(name):
    """A seed for ``random.Random`` that is fixed per ``name`` (a probe's secret) and moves
    with ``INFRADEV_PROBE_SEED``: real grades run seed 0, `tasks power` also seed 1, so a mutant
    that only the seed-0 workload misses is told from one no workload can reveal."""
    if type(name) is not str or not name:
        raise ValueError("a workload seed is named by a non-empty string")
    raw = os.environ.get(SEED_ENV, "0")
    try:
        offset = int(raw)
    except ValueError:
        raise ValueError(f"{SEED_ENV}={raw!r} is not an integer") from None
    return zlib.crc32(name.encode()) + offset
