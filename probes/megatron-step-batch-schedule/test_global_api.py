"""State probe for the module-level microbatch API with step schedules: init, the per-step
update_num_microbatches() calls that training makes, reconfiguration after a change of
data-parallel size, the deprecated rampup argument, and argument conflicts."""
# INFRADEV-PROBE-CANARY-e932458063d5

import contextlib
import logging

import pytest
from infradev_probe import subject

# The submission runs in the subject sandbox; `mbc` is a proxy for its module, whose global
# calculator lives there too.
mbc = subject.module("megatron.core.num_microbatches_calculator")
remote_logging = subject.module("logging")
remote_io = subject.module("io")


@pytest.fixture(autouse=True)
def _clean_global():
    mbc.unset_num_microbatches_calculator()
    yield
    mbc.unset_num_microbatches_calculator()


@contextlib.contextmanager
def _subject_warnings():
    """caplog.at_level(logging.WARNING), in the subject: a handler on the subject's root
    logger writes every WARNING-or-above record's message to a StringIO living there; the
    root level is WARNING meanwhile. Yields a function returning the text captured so far."""
    root = remote_logging.getLogger()
    level = root.level
    stream = remote_io.StringIO()
    handler = remote_logging.StreamHandler(stream)
    handler.setLevel(logging.WARNING)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    generation = subject.generation
    try:
        yield stream.getvalue
    finally:
        if subject.generation == generation:
            root.removeHandler(handler)
            root.setLevel(level)


def test_training_loop_through_module_functions():
    """Requirement: init_num_microbatches_calculator(rank, global_batch_size=None,
    micro_batch_size, data_parallel_size, step_batch_size_schedule=..., seq_length=...) builds a
    StepBatchsizeNumMicroBatchesCalculator; a training loop that calls
    update_num_microbatches(consumed, consistency_check=True) after each step of
    get_current_global_batch_size() samples sees the batch size change at the first step whose
    consumed count reaches a threshold; reconfigure_num_microbatches_calculator with a larger
    data_parallel_size resumes at the right entry.

    The official tests only build step calculators directly, never through the module
    functions, and never run a training loop across thresholds."""
    mbc.init_num_microbatches_calculator(
        rank=0, global_batch_size=None, micro_batch_size=2, data_parallel_size=4,
        step_batch_size_schedule="0:16 2M:32 10M:64", seq_length=1000)
    assert subject.isinstance(mbc._GLOBAL_NUM_MICROBATCHES_CALCULATOR,
                              mbc.StepBatchsizeNumMicroBatchesCalculator) is True
    consumed, seen = 0, []
    while consumed < 20_000:
        bs = mbc.get_current_global_batch_size()
        assert mbc.get_num_microbatches() == bs // 8
        assert mbc.get_micro_batch_size() == 2
        seen.append((consumed, bs))
        consumed += bs
        mbc.update_num_microbatches(consumed, consistency_check=True)
    # Thresholds in samples: 2000 and 10000 (tokens / seq_length).
    for c, bs in seen:
        assert bs == (16 if c < 2000 else 32 if c < 10000 else 64), (c, bs)
    first_32 = next(c for c, bs in seen if bs == 32)
    assert first_32 - 16 < 2000 <= first_32

    # Scale out from dp=4 to dp=8 at the current position (e.g. after a restart).
    mbc.reconfigure_num_microbatches_calculator(
        rank=0, micro_batch_size=2, data_parallel_size=8,
        step_batch_size_schedule="0:16 2M:32 10M:64", seq_length=1000)
    mbc.update_num_microbatches(consumed, consistency_check=True)
    assert mbc.get_current_global_batch_size() == 64
    assert mbc.get_num_microbatches() == 4
    assert mbc.get_current_running_global_batch_size() == 64


def test_deprecated_rampup_and_conflicts():
    """Requirement: rampup_batch_size is deprecated and ignored: passing it logs a warning
    mentioning the deprecation on rank 0 and yields a constant calculator for
    global_batch_size; a step schedule together with decrease_batch_size_if_needed=True raises
    ValueError; constant mode without global_batch_size raises AssertionError; all parameters
    after rank have defaults and can be passed by keyword.

    The official tests never pass rampup_batch_size and never call
    init_num_microbatches_calculator with a schedule."""
    with _subject_warnings() as captured:
        mbc.init_num_microbatches_calculator(
            rank=0, rampup_batch_size=[16, 16, 1000], global_batch_size=64,
            micro_batch_size=2, data_parallel_size=4)
        text = captured()
    assert isinstance(text, str) and "deprecat" in text.lower(), "no deprecation warning logged"
    calc = mbc._GLOBAL_NUM_MICROBATCHES_CALCULATOR
    assert subject.isinstance(calc, mbc.ConstantNumMicroBatchesCalculator) is True
    for consumed in (0, 500, 5000):
        mbc.update_num_microbatches(consumed, consistency_check=True)
        assert mbc.get_current_global_batch_size() == 64
        assert mbc.get_num_microbatches() == 8
    mbc.unset_num_microbatches_calculator()

    with pytest.raises(ValueError):
        mbc.init_num_microbatches_calculator(
            rank=0, micro_batch_size=2, data_parallel_size=4, decrease_batch_size_if_needed=True,
            step_batch_size_schedule="0:16 100:32")
    mbc.unset_num_microbatches_calculator()
    with pytest.raises(AssertionError):
        mbc.init_num_microbatches_calculator(rank=0, micro_batch_size=2, data_parallel_size=4)
