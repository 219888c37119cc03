"""Validation probe: malformed or inconsistent step batch-size schedules are rejected when
the calculator is built, divisibility by micro_batch_size * data_parallel_size is enforced
only for the current batch size (when update() is asked to check), and decreasing the batch
size is refused for step schedules."""
# INFRADEV-PROBE-CANARY-b55de104f50a

import pytest
from infradev_probe import subject

# The submission runs in the subject sandbox; `mbc` is a proxy for its module. Its exceptions
# come back as local exceptions that are instances of the builtin base (AssertionError,
# ValueError...), so `except` and `pytest.raises` work as on a local call.
mbc = subject.module("megatron.core.num_microbatches_calculator")

BAD = [
    ("100:16 1000:32", None, "first threshold is not 0"),
    ("1K:16 2K:32", None, "first threshold is not 0 (suffix)"),
    ("0:16 1000:32 1000:64", None, "duplicate threshold"),
    ("0:16 1K:32 1000:64", None, "duplicate threshold after suffix expansion"),
    ("0:16 1M:32 1000000:48", 100, "duplicate token threshold"),
    ("0:0 100:32", None, "zero batch size"),
    ("0:16 100:-32", None, "negative batch size"),
    ("0:16 100", None, "entry without a colon"),
    ("0:16 1X0:32", None, "not a number"),
    ("", None, "empty schedule"),
    ("   ", None, "blank schedule"),
]


def test_invalid_schedules_rejected():
    """Requirement: a schedule whose first threshold is not 0, whose thresholds repeat (also
    after suffix expansion or token conversion), whose batch sizes are not positive, or that
    is empty or malformed raises AssertionError or ValueError at construction.

    The official tests only check the decrease_batch_size_if_needed rejection and the
    runtime divisibility check."""
    for schedule, seq_length, why in BAD:
        try:
            mbc.StepBatchsizeNumMicroBatchesCalculator(
                micro_batch_size=2, data_parallel_size=4, decrease_batch_size_if_needed=False,
                rank=0, schedule=schedule, seq_length=seq_length)
        except (AssertionError, ValueError):
            continue
        raise AssertionError(f"schedule {schedule!r} accepted ({why})")


def test_divisibility_checked_for_current_batch_only():
    """Requirement: entries not divisible by micro_batch_size * data_parallel_size are accepted
    at construction; update(consumed, consistency_check=True) raises AssertionError exactly
    while the current entry is not divisible, and passes once consumed samples reach a
    divisible entry; decrease_batch_size_if_needed=True raises ValueError whatever the
    schedule.

    The official tests cover one undersized first entry only, never an indivisible entry
    between divisible ones."""
    calc = mbc.StepBatchsizeNumMicroBatchesCalculator(
        micro_batch_size=2, data_parallel_size=3, decrease_batch_size_if_needed=False,
        rank=0, schedule="0:12 500:20 900:36", seq_length=None)
    assert calc.get() == 2
    calc.update(499, consistency_check=True)
    assert calc.get() == 2
    with pytest.raises(AssertionError):
        calc.update(500, consistency_check=True)
    with pytest.raises(AssertionError):
        calc.update(899, consistency_check=True)
    calc.update(900, consistency_check=True)
    assert calc.get() == 6 and calc.get_current_global_batch_size() == 36
    for schedule in ("0:12", "0:12 500:24"):
        with pytest.raises(ValueError):
            mbc.StepBatchsizeNumMicroBatchesCalculator(
                micro_batch_size=2, data_parallel_size=3, decrease_batch_size_if_needed=True,
                rank=0, schedule=schedule, seq_length=None)
