"""Numerical and state probes for step batch-size schedules: schedule strings are parsed
(suffixes, token thresholds), and the batch size follows an independent model of the
schedule at every consumed-sample count, including exact threshold boundaries and long
sequences of update() calls."""
# INFRADEV-PROBE-CANARY-24c9a665b358

import random

from infradev_probe import subject, workload_seed

# The submission runs in the subject sandbox; `mbc` is a proxy for its module and each
# calculator a handle to an object living there.
mbc = subject.module("megatron.core.num_microbatches_calculator")

PROBE_SECRET = "PROBE-SECRET-step-schedule-77d2"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

MULT = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def _make(schedule, mbs=1, dp=1, seq_length=None):
    return mbc.StepBatchsizeNumMicroBatchesCalculator(
        micro_batch_size=mbs, data_parallel_size=dp, decrease_batch_size_if_needed=False,
        rank=1, schedule=schedule, seq_length=seq_length)


def _expected_bs(entries, consumed):
    """entries: sorted list of (threshold_samples, batch_size)."""
    bs = None
    for t, b in entries:
        if consumed >= t:
            bs = b
    return bs


def _check_boundaries(calc, entries, mbs, dp, schedule):
    for i, (t, b) in enumerate(entries):
        probes = [t, t + 1] + ([t - 1] if t > 0 else [])
        for c in probes:
            calc.update(c, consistency_check=False)
            want = _expected_bs(entries, c)
            got = calc.get_current_global_batch_size()
            assert got == want, f"{schedule!r}: consumed={c}: batch size {got}, expected {want}"
            assert calc.get() == want // (mbs * dp)


CASES = [
    # (schedule string, seq_length, expected sorted (threshold in samples, batch size))
    ("0:16 1000:32 5000:64", None, [(0, 16), (1000, 32), (5000, 64)]),
    ("0:16 1K:32 5k:64 2M:128", None, [(0, 16), (1000, 32), (5000, 64), (2_000_000, 128)]),
    ("0:8 1.5K:16 2.25M:32", None, [(0, 8), (1500, 16), (2_250_000, 32)]),
    ("0:8 3B:16 1T:32", None, [(0, 8), (3 * 10**9, 16), (10**12, 32)]),
    ("0:8,100:16, 300:24", None, [(0, 8), (100, 16), (300, 24)]),
    ("  0:32   7K:1K  ", None, [(0, 32), (7000, 1000)]),
    ("2K:64 0:32 1K:48", None, [(0, 32), (1000, 48), (2000, 64)]),
    # Token thresholds: samples = floor(tokens / seq_length).
    ("0:768 250B:1536 500B:3072 750B:6144", 4096,
     [(0, 768), (250 * 10**9 // 4096, 1536), (500 * 10**9 // 4096, 3072),
      (750 * 10**9 // 4096, 6144)]),
    ("0:64 1M:128 10M:256", 1000, [(0, 64), (1000, 128), (10000, 256)]),
    ("0:64 1000001:128", 1000, [(0, 64), (1000, 128)]),
    ("0:64 999999:128 2M:192", 1000, [(0, 64), (999, 128), (2000, 192)]),
]


def test_schedule_strings_and_boundaries():
    """Requirement: thresholds and batch sizes accept the K/M/B/T suffixes (1e3/1e6/1e9/1e12,
    either case, with a decimal mantissa such as 1.5K), entries may be separated by spaces or
    commas and given in any order, token thresholds are converted to samples by floor division
    by seq_length, and the batch size switches exactly when consumed samples reach a
    threshold (threshold - 1 still uses the previous entry).

    The official tests only use plain integer sample thresholds and never look at a
    threshold boundary or at seq_length."""
    for schedule, seq_length, entries in CASES:
        calc = _make(schedule, mbs=1, dp=1, seq_length=seq_length)
        assert calc.get_current_global_batch_size() == entries[0][1], (schedule, "initial")
        _check_boundaries(calc, entries, 1, 1, schedule)


def test_long_update_sequence_matches_model():
    """Requirement: over 40 random schedules (random suffixes, orders and token/sample
    thresholds) and 400 update() calls each, with consumed samples that mostly grow (training)
    but sometimes jump back (checkpoint reload), get(), get_current_global_batch_size(),
    get_current_running_global_batch_size() and get_micro_batch_size() always equal an
    independent model, and consistency_check=True passes exactly when the current batch size
    is divisible by micro_batch_size * data_parallel_size.

    The official tests make three or four update() calls on one fixed schedule."""
    rng = random.Random(SEED)
    for _ in range(40):
        mbs, dp = rng.choice([1, 2, 4]), rng.choice([1, 2, 3, 8])
        unit = mbs * dp
        seq_length = rng.choice([None, 512, 4096])
        n = rng.randrange(1, 7)
        sample_thr = sorted(rng.sample(range(1, 200_000), n - 1))
        parts, entries = [], []
        for i, t in enumerate([0] + sample_thr):
            bs = unit * rng.randrange(1, 50) if rng.random() < 0.9 else unit * 3 + 1
            if seq_length:
                tokens = t * seq_length + rng.randrange(seq_length)  # floors back to t
                if t == 0:
                    tokens = 0
                raw = tokens
            else:
                raw = t
            # Use a suffix when it represents the value exactly.
            text = str(raw)
            for suf in ("T", "B", "M", "K"):
                if raw and raw % MULT[suf] == 0:
                    text = f"{raw // MULT[suf]}{rng.choice([suf, suf.lower()])}"
                    break
            parts.append(f"{text}:{bs}")
            entries.append((t, bs))
        rng.shuffle(parts)
        calc = _make(" ".join(parts), mbs=mbs, dp=dp, seq_length=seq_length)
        # The 400 steps do not depend on the calculator's answers, so they are sent in one
        # batch (one round trip; every request runs, in order, whatever the others did) and
        # checked step by step afterwards, exactly as if they had been made one at a time.
        steps = []
        consumed = 0
        with subject.batch() as b:
            for _ in range(400):
                if rng.random() < 0.05:
                    consumed = rng.randrange(0, consumed + 1)
                else:
                    consumed += rng.choice([0, 1, unit, rng.randrange(1, 5000)])
                want = _expected_bs(entries, consumed)
                divisible = want % unit == 0
                updates = []  # (batch item, whether it must raise AssertionError)
                if rng.random() < 0.5:
                    updates.append((b.call(calc.update, consumed, consistency_check=True),
                                    not divisible))
                    if not divisible:
                        updates.append((b.call(calc.update, consumed, consistency_check=False),
                                        False))
                else:
                    updates.append((b.call(calc.update, consumed, consistency_check=False), False))
                steps.append((consumed, want, updates, (
                    b.call(calc.get_current_global_batch_size),
                    b.call(calc.get_current_running_global_batch_size),
                    b.call(calc.get),
                    b.call(calc.get_micro_batch_size),
                )))
        for consumed, want, updates, (gbs, running, nmb, mbs_now) in steps:
            for item, must_raise in updates:
                if must_raise:
                    assert isinstance(item.error, AssertionError), (
                        f"consumed={consumed}: update(consistency_check=True) accepted batch size "
                        f"{want}, not divisible by {unit}")
                else:
                    item.value  # noqa: B018 - raises the subject's error, if any
            assert gbs.value == want, f"consumed={consumed}"
            assert running.value == want
            assert nmb.value == want // unit
            assert mbs_now.value == mbs
        # And exactly at every converted threshold and the sample before it.
        for t, _ in entries:
            for c in (t - 1, t) if t else (0,):
                calc.update(c, consistency_check=False)
                want = _expected_bs(entries, c)
                assert calc.get_current_global_batch_size() == want, (
                    f"{' '.join(parts)!r} seq_length={seq_length}: consumed={c}")
