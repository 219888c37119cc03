"""State probes for the training integration of step batch-size schedules: the
--step-batch-size-schedule option and its validation, set_global_variables installing a
calculator whose thresholds are tokens (seq_length passed through), and sample-based training
deriving train_iters by stepping through the schedule. Each runs the real argument path
(parse_args over sys.argv, validate_args, set_global_variables) as pretrain does on one rank."""
# INFRADEV-PROBE-CANARY-b42a101b01fe

import random

import pytest
from infradev_probe import subject, workload_seed

# The submission runs in the subject sandbox; these are proxies for its modules. The parsed
# arguments are a handle to an argparse.Namespace living there.
arguments = subject.module("megatron.training.arguments")
global_vars = subject.module("megatron.training.global_vars")
training = subject.module("megatron.training.training")
config = subject.module("megatron.training.config")
mbc = subject.module("megatron.core.num_microbatches_calculator")
remote_sys = subject.module("sys")

PROBE_SECRET = "PROBE-SECRET-step-training-81f0"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

SEQ_LENGTHS = (500, 1000, 1536, 2000, 4096)


@pytest.fixture(autouse=True)
def _fresh_globals():
    """Every test starts and ends with no global args or calculator and the subject's argv."""
    argv = remote_sys.argv
    global_vars.unset_global_variables()
    yield
    global_vars.unset_global_variables()
    remote_sys.argv = argv


def _parse(*extra, seq_length=1024, mbs=2, train_samples=100_000):
    """parse_args() over a small GPT command line plus `extra`, as pretrain_gpt.py would."""
    remote_sys.argv = [
        "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64",
        "--num-attention-heads", "4", "--seq-length", str(seq_length),
        "--max-position-embeddings", str(seq_length), "--micro-batch-size", str(mbs),
        "--train-samples", str(train_samples), "--lr", "1e-4", *extra]
    return arguments.parse_args()


def _setup(schedule, seq_length, mbs, train_samples=100_000):
    """parse, validate and set_global_variables (no tokenizer) with a step schedule."""
    args = _parse("--step-batch-size-schedule", schedule, seq_length=seq_length, mbs=mbs,
                  train_samples=train_samples)
    arguments.validate_args(args)
    global_vars.set_global_variables(args, build_tokenizer=False)
    return args


def _data_parallel_size(seq_length, mbs):
    """The data-parallel size validate_args derives in this sandbox (world size from env)."""
    args = _parse(seq_length=seq_length, mbs=mbs)
    arguments.validate_args(args)
    return args.data_parallel_size


def _draw_schedule(rng, seq_length, unit):
    """A schedule in tokens and its independent meaning: sorted (threshold in samples, batch
    size). Token thresholds are often not multiples of seq_length (floor division) and are
    written with a K/M suffix when they allow it."""
    n = rng.randint(2, 4)
    samples = [0] + sorted(rng.sample(range(1, 2500), n - 1))
    mults = sorted(rng.sample(range(1, 20), n))
    entries, parts = [], []
    for s, m in zip(samples, mults):
        tokens = s * seq_length + (rng.randrange(1, seq_length) if s and rng.random() < 0.6
                                   else 0)
        if tokens and tokens % 10**6 == 0 and rng.random() < 0.5:
            text = f"{tokens // 10**6}M"
        elif tokens and tokens % 1000 == 0:
            text = f"{tokens // 1000}K"
        else:
            text = str(tokens)
        entries.append((s, unit * m))
        parts.append(f"{text}:{unit * m}")
    sep = rng.choice([" ", ", ", ","])
    return sep.join(parts), entries


def _batch_at(entries, consumed):
    return [b for t, b in entries if t <= consumed][-1]


def _iterations(entries, train_samples):
    """Iterations until train_samples are consumed, each iteration consuming the batch size
    scheduled at the samples consumed before it (the last, partial batch counts), computed
    segment by segment: within one entry the steps are ceil(distance / batch size)."""
    consumed, iters = 0, 0
    for i, (_, bs) in enumerate(entries):
        end = entries[i + 1][0] if i + 1 < len(entries) else train_samples
        end = min(end, train_samples)
        if consumed < end:
            steps = -(-(end - consumed) // bs)
            iters += steps
            consumed += steps * bs
    return iters


def test_schedule_option_and_global_batch_size_conflict():
    """Requirement: parse_args() accepts --step-batch-size-schedule (default None;
    TrainingConfig has the field step_batch_size_schedule, default None) and validate_args
    accepts it alone; the schedule together with an explicit --global-batch-size is a
    ValueError in argument validation, while --global-batch-size alone still validates.

    The official tests only exercise megatron/core/num_microbatches_calculator.py; no official
    test parses or validates training arguments."""
    params = subject.signature(config.TrainingConfig).parameters
    assert "step_batch_size_schedule" in params, "TrainingConfig has no step_batch_size_schedule"
    assert params["step_batch_size_schedule"].default is None

    schedule = "0:16 2M:32, 10M:64"
    args = _parse("--step-batch-size-schedule", schedule, seq_length=1000)
    assert args.step_batch_size_schedule == schedule
    arguments.validate_args(args)

    args = _parse(seq_length=1000)
    assert args.step_batch_size_schedule is None
    args = _parse("--global-batch-size", "48", seq_length=1000)
    arguments.validate_args(args)
    assert args.global_batch_size == 48

    for extra in (("--step-batch-size-schedule", schedule, "--global-batch-size", "64"),
                  ("--global-batch-size", "16", "--step-batch-size-schedule", "0:16 100:32")):
        with pytest.raises(ValueError):
            arguments.validate_args(_parse(*extra, seq_length=1000))


def test_set_global_variables_uses_token_thresholds():
    """Requirement: set_global_variables(args) installs a StepBatchsizeNumMicroBatchesCalculator
    for --step-batch-size-schedule with seq_length, so the schedule's thresholds are tokens
    (floor-divided by --seq-length): over random schedules, update_num_microbatches() at one
    sample before, at and after each threshold gives the scheduled batch size and
    batch_size // (micro_batch_size * data_parallel_size) microbatches. Without a schedule it
    installs a ConstantNumMicroBatchesCalculator for --global-batch-size.

    The official tests build calculators directly; nothing official goes through
    set_global_variables, so a schedule read as samples (seq_length not passed) is missed."""
    rng = random.Random(SEED)
    for _ in range(4):
        seq_length = rng.choice(SEQ_LENGTHS)
        mbs = rng.choice((1, 2, 4))
        dp = _data_parallel_size(seq_length, mbs)
        global_vars.unset_global_variables()
        schedule, entries = _draw_schedule(rng, seq_length, mbs * dp)
        _setup(schedule, seq_length, mbs)
        assert subject.isinstance(mbc._GLOBAL_NUM_MICROBATCHES_CALCULATOR,
                                  mbc.StepBatchsizeNumMicroBatchesCalculator) is True
        assert mbc.get_current_global_batch_size() == entries[0][1]
        for t, _ in entries:
            for consumed in ([t - 1] if t else []) + [t, t + 1]:
                mbc.update_num_microbatches(consumed)
                want = _batch_at(entries, consumed)
                got = mbc.get_current_global_batch_size()
                assert got == want, (schedule, seq_length, consumed, got, want)
                assert mbc.get_num_microbatches() == want // (mbs * dp)

    global_vars.unset_global_variables()
    args = _parse("--global-batch-size", "96", seq_length=1000, mbs=2)
    arguments.validate_args(args)
    global_vars.set_global_variables(args, build_tokenizer=False)
    assert subject.isinstance(mbc._GLOBAL_NUM_MICROBATCHES_CALCULATOR,
                              mbc.ConstantNumMicroBatchesCalculator) is True
    mbc.update_num_microbatches(10**6)
    assert mbc.get_current_global_batch_size() == 96


def test_train_iters_step_through_schedule():
    """Requirement: for sample-based training with a schedule, update_train_iters(args) sets
    args.train_iters to the number of iterations, each consuming the batch size scheduled at
    the samples consumed before it, until train_samples are consumed (a final partial batch
    counts), and leaves the installed calculator at 0 consumed samples; without a schedule it
    stays train_samples // global_batch_size. Checked over random token schedules and
    train_samples drawn at random, on a threshold and exactly at, one before and one after an
    iteration boundary, against an independent segment-by-segment count.

    The official tests never derive train_iters; the replaced ramp-up loop (which also added a
    constant phase with the global batch size) is only in training.py."""
    rng = random.Random(SEED + 1)
    for _ in range(4):
        seq_length = rng.choice(SEQ_LENGTHS)
        mbs = rng.choice((1, 2))
        unit = mbs * _data_parallel_size(seq_length, mbs)
        global_vars.unset_global_variables()
        schedule, entries = _draw_schedule(rng, seq_length, unit)
        args = _setup(schedule, seq_length, mbs)

        # Consumed-sample counts after each iteration, up to past the last threshold.
        boundaries, consumed = [], 0
        while consumed < entries[-1][0] + 400:
            consumed += _batch_at(entries, consumed)
            boundaries.append(consumed)
        picks = rng.sample(boundaries, 2)
        totals = [rng.randint(1, boundaries[-1] + 2000), entries[-1][0], 1]
        totals += [c + d for c in picks for d in (-1, 0, 1)]
        for total in totals:
            args.train_iters = None
            args.train_samples = total
            training.update_train_iters(args)
            want = _iterations(entries, total)
            assert args.train_iters == want, (schedule, seq_length, total, args.train_iters, want)
            assert mbc.get_current_global_batch_size() == entries[0][1], \
                "the calculator is not back at 0 consumed samples"

    global_vars.unset_global_variables()
    args = _parse("--global-batch-size", "48", seq_length=1000, mbs=2, train_samples=10_000)
    arguments.validate_args(args)
    global_vars.set_global_variables(args, build_tokenizer=False)
    training.update_train_iters(args)
    assert args.train_iters == 10_000 // 48
