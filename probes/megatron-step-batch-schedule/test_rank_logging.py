"""State probes for what `rank` and `rampup_batch_size` control and for the constant
calculator kept as today: only rank 0 logs (the step schedule at INFO, the rampup deprecation
warning), nothing is logged about rampup_batch_size when it is not passed, microbatch counts are
ints, and a constant batch too small for one microbatch per data-parallel rank is rejected."""
# INFRADEV-PROBE-CANARY-5d07c39a1e84

import contextlib
import logging
import random
import re

import pytest
from infradev_probe import subject, workload_seed

# The submission runs in the subject sandbox; `mbc` is a proxy for its module, whose logger
# and global calculator live there too.
mbc = subject.module("megatron.core.num_microbatches_calculator")
remote_logging = subject.module("logging")
remote_io = subject.module("io")

MODULE_LOGGER = "megatron.core.num_microbatches_calculator"

PROBE_SECRET = "PROBE-SECRET-rank-logging-3c5e"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

_RECORD_END = "\x1e"
_FIELD_SEP = "\x1f"


@pytest.fixture(autouse=True)
def _clean_global():
    mbc.unset_num_microbatches_calculator()
    yield
    mbc.unset_num_microbatches_calculator()


@contextlib.contextmanager
def _module_log():
    """caplog.at_level(logging.INFO, logger=<the module's logger>), in the subject: a handler
    on the module's logger writes every INFO-or-above record (level number and message) to a
    StringIO living there; the logger's level is INFO meanwhile. Yields a function returning
    the (levelno, message) pairs captured so far (an int() of the level tolerates the
    handler's newline terminator before it)."""
    log = remote_logging.getLogger(MODULE_LOGGER)
    level = log.level
    stream = remote_io.StringIO()
    handler = remote_logging.StreamHandler(stream)
    handler.setLevel(logging.INFO)
    handler.setFormatter(remote_logging.Formatter(
        "%(levelno)d" + _FIELD_SEP + "%(message)s" + _RECORD_END))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    generation = subject.generation

    def records():
        text = stream.getvalue()
        assert isinstance(text, str)
        out = []
        for chunk in text.split(_RECORD_END):
            if chunk.strip():
                levelno, _, message = chunk.partition(_FIELD_SEP)
                out.append((int(levelno), message))
        return out

    try:
        yield records
    finally:
        if subject.generation == generation:
            log.removeHandler(handler)
            log.setLevel(level)


def _mentions_rampup(message):
    text = message.lower()
    return "deprecat" in text or "rampup" in text or "ramp-up" in text or "ramp up" in text


def _schedule(rng, unit):
    """A random step schedule whose batch sizes are distinct multiples of `unit` (< 1000)."""
    sizes = rng.sample(range(1, 999 // unit + 1), rng.randint(2, 4))
    sizes = sorted(s * unit for s in sizes)
    thresholds = [0] + sorted(rng.sample(range(50, 5000), len(sizes) - 1))
    entries = list(zip(thresholds, sizes))
    text = " ".join(f"{t}:{b}" for t, b in rng.sample(entries, len(entries)))
    return entries, text


def test_step_schedule_logged_on_rank_0_only():
    """Requirement: `rank` only controls logging: StepBatchsizeNumMicroBatchesCalculator logs
    its schedule (every entry's batch size) at INFO through the module's logger on rank 0,
    and on any other rank (1, 3) logs nothing at INFO or above, neither at construction nor
    on update(); the same holds through init_num_microbatches_calculator.

    The official tests build every calculator on rank 0 and never look at the log."""
    rng = random.Random(SEED)
    for _ in range(3):
        mbs, dp = rng.choice([1, 2, 4]), rng.choice([1, 2, 4, 8])
        entries, text = _schedule(rng, mbs * dp)

        with _module_log() as records:
            mbc.StepBatchsizeNumMicroBatchesCalculator(
                micro_batch_size=mbs, data_parallel_size=dp,
                decrease_batch_size_if_needed=False, rank=0, schedule=text)
            got = records()
        info = [m for lv, m in got if lv >= logging.INFO]
        assert info, f"rank 0 logged nothing at INFO or above for schedule {text!r}"
        joined = "\n".join(info)
        for _, bs in entries:
            assert re.search(rf"(?<![\d.]){bs}(?![\d.])", joined), (
                f"rank 0's schedule log does not show batch size {bs} of {text!r}: {joined!r}")

        for rank in (1, 3):
            with _module_log() as records:
                calc = mbc.StepBatchsizeNumMicroBatchesCalculator(
                    micro_batch_size=mbs, data_parallel_size=dp,
                    decrease_batch_size_if_needed=False, rank=rank, schedule=text)
                for t, _ in entries:
                    calc.update(t, consistency_check=True, verbose=True)
                got = records()
            assert got == [], f"rank {rank} logged {got!r} for schedule {text!r}"

    mbs, dp = rng.choice([1, 2]), rng.choice([2, 4])
    entries, text = _schedule(rng, mbs * dp)
    for rank in (1, 3):
        with _module_log() as records:
            mbc.init_num_microbatches_calculator(
                rank=rank, micro_batch_size=mbs, data_parallel_size=dp,
                step_batch_size_schedule=text)
            mbc.update_num_microbatches(entries[-1][0], consistency_check=True, verbose=True)
            got = records()
        assert got == [], f"rank {rank} logged {got!r} through init_num_microbatches_calculator"
        mbc.unset_num_microbatches_calculator()
    with _module_log() as records:
        mbc.init_num_microbatches_calculator(
            rank=0, micro_batch_size=mbs, data_parallel_size=dp, step_batch_size_schedule=text)
        got = records()
    assert [m for lv, m in got if lv >= logging.INFO], "rank 0 logged no schedule through init"


def test_rampup_warning_rank_0_only():
    """Requirement: the rampup_batch_size deprecation warning is logged (WARNING, through the
    module's logger) by init_num_microbatches_calculator and by
    reconfigure_num_microbatches_calculator on rank 0 exactly when rampup_batch_size is not
    None: nothing about it without rampup_batch_size (constant or schedule), nothing on ranks
    1 and 3 even with it; the constant calculator stays for global_batch_size.

    The official tests never pass rampup_batch_size and never look at the log."""
    rng = random.Random(SEED + 1)
    mbs, dp = rng.choice([1, 2, 4]), rng.choice([1, 2, 4])
    gbs = mbs * dp * rng.randint(2, 16)
    rampup = [mbs * dp, mbs * dp, rng.randint(100, 10_000)]
    _, schedule = _schedule(rng, mbs * dp)
    kwargs = dict(global_batch_size=gbs, micro_batch_size=mbs, data_parallel_size=dp)

    def configure(fn_name, rank, **extra):
        with _module_log() as records:
            if fn_name == "init":
                mbc.unset_num_microbatches_calculator()
                mbc.init_num_microbatches_calculator(rank=rank, **kwargs, **extra)
            else:
                mbc.reconfigure_num_microbatches_calculator(rank=rank, **kwargs, **extra)
            return records()

    mbc.init_num_microbatches_calculator(rank=1, **kwargs)  # for reconfigure's first call
    for fn_name in ("init", "reconfigure"):
        # Without rampup_batch_size: no deprecation warning, on rank 0 or elsewhere.
        for rank in (0, 1):
            for extra in ({}, {"step_batch_size_schedule": schedule}):
                got = configure(fn_name, rank, **extra)
                bad = [m for lv, m in got if lv >= logging.WARNING and _mentions_rampup(m)]
                assert not bad, (
                    f"{fn_name} on rank {rank} without rampup_batch_size ({extra}) logged {bad!r}")
        # With it, on a rank other than 0: nothing about it.
        for rank in (1, 3):
            got = configure(fn_name, rank, rampup_batch_size=list(rampup))
            bad = [m for lv, m in got if lv >= logging.WARNING and _mentions_rampup(m)]
            assert not bad, f"{fn_name} on rank {rank} warned about rampup_batch_size: {bad!r}"
            assert subject.isinstance(mbc._GLOBAL_NUM_MICROBATCHES_CALCULATOR,
                                      mbc.ConstantNumMicroBatchesCalculator) is True
            assert mbc.get_current_global_batch_size() == gbs
        # With it, on rank 0: a WARNING saying it is deprecated.
        got = configure(fn_name, 0, rampup_batch_size=list(rampup))
        warned = [m for lv, m in got if lv >= logging.WARNING and "deprecat" in m.lower()]
        assert warned, f"{fn_name} on rank 0 with rampup_batch_size logged no warning: {got!r}"
        assert subject.isinstance(mbc._GLOBAL_NUM_MICROBATCHES_CALCULATOR,
                                  mbc.ConstantNumMicroBatchesCalculator) is True
        for consumed in (0, rampup[2] // 2, rampup[2] + 1):
            mbc.update_num_microbatches(consumed, consistency_check=True)
            assert mbc.get_current_global_batch_size() == gbs
            assert mbc.get_num_microbatches() == gbs // (mbs * dp)


def test_microbatch_counts_are_ints():
    """Requirement: the number of microbatches is the int batch_size // (micro_batch_size *
    data_parallel_size): get() of ConstantNumMicroBatchesCalculator (also with
    decrease_batch_size_if_needed=True) and of StepBatchsizeNumMicroBatchesCalculator, and
    get_num_microbatches() for both installed calculators, return an int of that value.

    The official tests compare the count with ==, which a float count also satisfies."""
    rng = random.Random(SEED + 2)
    for _ in range(4):
        mbs, dp = rng.choice([1, 2, 4]), rng.choice([1, 2, 3, 4, 8])
        unit = mbs * dp
        gbs = unit * rng.randint(1, 20)
        rank = rng.choice([0, 1])
        calc = mbc.ConstantNumMicroBatchesCalculator(gbs, mbs, dp, False, rank)
        n = calc.get()
        assert type(n) is int and n == gbs // unit, (gbs, mbs, dp, n)
        odd = gbs + rng.randint(1, unit - 1) if unit > 1 else gbs
        calc = mbc.ConstantNumMicroBatchesCalculator(odd, mbs, dp, True, rank)
        n = calc.get()
        assert type(n) is int and n == odd // unit, (odd, mbs, dp, n)
        assert type(calc.get_current_running_global_batch_size()) is int

        mbc.init_num_microbatches_calculator(
            rank=rank, global_batch_size=gbs, micro_batch_size=mbs, data_parallel_size=dp)
        mbc.update_num_microbatches(rng.randint(0, 10_000), consistency_check=True)
        n = mbc.get_num_microbatches()
        assert type(n) is int and n == gbs // unit, (gbs, mbs, dp, n)
        mbc.unset_num_microbatches_calculator()

        entries, text = _schedule(rng, unit)
        calc = mbc.StepBatchsizeNumMicroBatchesCalculator(
            micro_batch_size=mbs, data_parallel_size=dp, decrease_batch_size_if_needed=False,
            rank=rank, schedule=text)
        mbc.init_num_microbatches_calculator(
            rank=rank, micro_batch_size=mbs, data_parallel_size=dp,
            step_batch_size_schedule=text)
        for t, bs in entries:
            for c in (t, t + 1):
                calc.update(c, consistency_check=True)
                n = calc.get()
                assert type(n) is int and n == bs // unit, (text, c, n)
                mbc.update_num_microbatches(c, consistency_check=True)
                n = mbc.get_num_microbatches()
                assert type(n) is int and n == bs // unit, (text, c, n)
        mbc.unset_num_microbatches_calculator()


def test_constant_batch_below_one_microbatch_rejected():
    """Requirement: as today, a constant global batch that gives zero microbatches (with
    decrease_batch_size_if_needed=True, a global_batch_size smaller than micro_batch_size *
    data_parallel_size, which rounds down to 0) raises AssertionError, from
    ConstantNumMicroBatchesCalculator and from init_num_microbatches_calculator; one full
    microbatch per rank is accepted.

    The official tests only use global batch sizes of at least one microbatch per rank."""
    rng = random.Random(SEED + 3)
    for _ in range(4):
        mbs, dp = rng.choice([1, 2, 4]), rng.choice([2, 4, 8])
        unit = mbs * dp
        gbs = rng.randint(1, unit - 1)
        rank = rng.choice([0, 1])
        with pytest.raises(AssertionError):
            mbc.ConstantNumMicroBatchesCalculator(gbs, mbs, dp, True, rank)
        with pytest.raises(AssertionError):
            mbc.init_num_microbatches_calculator(
                rank=rank, global_batch_size=gbs, micro_batch_size=mbs, data_parallel_size=dp,
                decrease_batch_size_if_needed=True)
        mbc.unset_num_microbatches_calculator()
        calc = mbc.ConstantNumMicroBatchesCalculator(unit + gbs, mbs, dp, True, rank)
        assert calc.get() == 1
        assert calc.get_current_running_global_batch_size() == unit
