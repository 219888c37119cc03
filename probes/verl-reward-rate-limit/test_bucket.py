"""Time probes of AsyncTokenBucket: acquisitions are paced at rate_limit tokens per second after
a burst of max_tokens, whether they come one after another or all at once, and an acquisition
larger than the bucket neither deadlocks nor lets the next ones through early. Each time is the
broker's measure of one subject call that runs all the acquisitions on one event loop."""
# INFRADEV-PROBE-CANARY-7f3b2c9e4d10

import numpy as np
import pytest
from infradev_probe import subject, workload_seed

import _common as C

PROBE_SECRET = "PROBE-SECRET-token-bucket-3a8d"
SEED = workload_seed(PROBE_SECRET)

C.import_now()


@pytest.fixture
def s():
    session = C.Session(manager=False)
    try:
        yield session
    finally:
        session.close()


def _run(s, bucket, amounts, concurrent):
    n = s.scores.acquire_all(s.loop, bucket, [float(a) for a in amounts], concurrent)
    ns = subject.last_subject_ns
    assert n == len(amounts)
    assert isinstance(ns, int) and ns >= 0, "the broker did not report the call's subject time"
    return ns / 1e9


def _check(t, expect, what):
    # Lower bound: a bucket that starts full with max_tokens and refills at rate_limit cannot
    # grant `total` tokens sooner than (total - max_tokens) / rate_limit; 0.95x leaves room for
    # the event loop's timer granularity. Upper bound: 1.5x + 0.5 s on a shared 2-core machine.
    assert t >= 0.95 * expect, f"{what}: {t:.3f} s < {expect:.3f} s: the rate was exceeded"
    assert t <= 1.5 * expect + 0.5, f"{what}: {t:.3f} s, expected ~{expect:.3f} s"


def test_sequential_acquisitions_are_paced(s):
    """Requirement: AsyncTokenBucket(rate_limit=40.0, max_tokens=8.0), acquisitions of 0.5-2.5
    tokens one after the other totalling T tokens take (T - 8) / 40 s (>= 0.95x, <= 1.5x + 0.5 s);
    then, on a bucket built without max_tokens (capacity = rate_limit = 20.0), 60 acquisitions
    of one token take (60 - 20) / 20 s."""
    rng = np.random.default_rng([SEED, 1])
    amounts = [float(a) for a in rng.choice([0.5, 1.0, 1.5, 2.5], size=80)]
    total = sum(amounts)
    bucket = C.limited.AsyncTokenBucket(rate_limit=40.0, max_tokens=8.0)
    _check(_run(s, bucket, amounts, False), (total - 8.0) / 40.0, f"{len(amounts)} sequential ({total} tokens)")

    bucket = C.limited.AsyncTokenBucket(rate_limit=20.0)
    _check(_run(s, bucket, [1.0] * 60, False), (60 - 20) / 20.0, "60 x 1 token, default capacity")


def test_over_capacity_acquisitions_pay_their_debt(s):
    """Requirement: AsyncTokenBucket(rate_limit=100.0, max_tokens=10.0): acquire(50), acquire(50),
    acquire(5), acquire(50), acquire(30) in turn return (no deadlock on a request above capacity)
    and take together (185 - 10) / 100 = 1.75 s (>= 0.95x, <= 1.5x + 0.5 s); on a fresh bucket,
    six acquire(50) in turn take (300 - 10) / 100 = 2.9 s: a request above capacity waits for
    its tokens and the tokens it borrowed delay the following requests."""
    bucket = C.limited.AsyncTokenBucket(rate_limit=100.0, max_tokens=10.0)
    amounts = [50, 50, 5, 50, 30]
    _check(_run(s, bucket, amounts, False), (sum(amounts) - 10) / 100.0, "over-capacity sequence")

    # Over-capacity requests only, back to back: each one's wait must start from the balance the
    # previous one left (negative), measured from the moment it was taken.
    bucket = C.limited.AsyncTokenBucket(rate_limit=100.0, max_tokens=10.0)
    _check(_run(s, bucket, [50] * 6, False), (300 - 10) / 100.0, "6 x 50 tokens")


def test_concurrent_acquirers_never_exceed_the_rate(s):
    """Requirement: AsyncTokenBucket(rate_limit=50.0, max_tokens=10.0) with 40 coroutines
    acquiring 2 tokens and 2 acquiring 15 (above capacity), all started at once (asyncio.gather),
    finish after (110 - 10) / 50 = 2.0 s (>= 0.95x, <= 1.5x + 0.5 s)."""
    rng = np.random.default_rng([SEED, 3])
    amounts = [2.0] * 40 + [15.0] * 2
    amounts = [amounts[i] for i in rng.permutation(len(amounts))]
    bucket = C.limited.AsyncTokenBucket(rate_limit=50.0, max_tokens=10.0)
    _check(_run(s, bucket, amounts, True), (sum(amounts) - 10) / 50.0, "42 concurrent acquirers")
