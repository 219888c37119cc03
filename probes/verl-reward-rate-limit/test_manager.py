"""State and time probes of RateLimitedRewardLoopManager: the concurrency cap (configured and
default), the request and token rate limits over a window, the timeout and error fallbacks
(which must free their concurrency slot), and user reward functions without **kwargs."""
# INFRADEV-PROBE-CANARY-7f3b2c9e4d10

import numpy as np
import pytest
import torch
from infradev_probe import workload_seed

import _common as C

PROBE_SECRET = "PROBE-SECRET-rate-limited-manager-51c2"
SEED = workload_seed(PROBE_SECRET)

C.import_now()


@pytest.fixture
def s():
    session = C.Session()
    try:
        yield session
    finally:
        session.close()


def _rng(k):
    return np.random.default_rng([SEED, k])


def test_concurrency_cap_async_and_sync(s):
    """Requirement: with reward_model.max_concurrent = 3 (no max_rpm / max_tpm), scoring 12
    responses whose async compute_score awaits 0.15 s each never has more than 3 calls in flight
    and does reach 3 (the responses are scored concurrently); each reward sits at the last valid
    token of its response and reward_extra_info["acc"] lists the scores in batch order. A
    synchronous compute_score (run in worker threads) is capped the same way at
    max_concurrent = 2."""
    rng = _rng(1)
    specs = [{"delay": 0.15, "score": float(rng.integers(1, 100)) / 8} for _ in range(12)]
    manager = s.manager({"max_concurrent": 3, "timeout": 30.0})
    data, lengths = C.batch(specs, rng)
    rewards, extra, _ = C.score_all(manager, data)
    st = s.state()
    assert st["calls"] == 12 and st["in_flight"] == 0, st
    assert st["max_in_flight"] == 3, f"async: {st['max_in_flight']} compute_score calls in flight, cap 3"
    torch.testing.assert_close(rewards, C.expected_rewards(specs, lengths), rtol=0, atol=0)
    assert extra["acc"] == [sp["score"] for sp in specs]

    s.scores.reset()
    C.limited.RateLimitedRewardLoopManager._class_initialized = False
    specs = [{"delay": 0.1, "score": float(i)} for i in range(8)]
    manager = s.manager({"max_concurrent": 2, "timeout": 30.0}, compute_score="score_sync")
    data, lengths = C.batch(specs, rng)
    rewards, extra, _ = C.score_all(manager, data)
    st = s.state()
    assert st["calls"] == 8 and st["max_in_flight"] == 2, f"sync: {st}"
    torch.testing.assert_close(rewards, C.expected_rewards(specs, lengths), rtol=0, atol=0)


def test_default_concurrency_is_one(s):
    """Requirement: with an empty reward_model section (every key at its default: max_concurrent
    1, no rate limits, timeout 300 s) the manager runs one compute_score at a time and scores
    every response."""
    rng = _rng(2)
    specs = [{"delay": 0.05, "score": 0.5 + i} for i in range(6)]
    manager = s.manager({})
    data, lengths = C.batch(specs, rng)
    rewards, extra, _ = C.score_all(manager, data)
    st = s.state()
    assert st["calls"] == 6 and st["max_in_flight"] == 1, st
    torch.testing.assert_close(rewards, C.expected_rewards(specs, lengths), rtol=0, atol=0)


def test_rpm_limit_over_a_window(s):
    """Requirement: max_rpm = 600 (10 requests/s, a bucket holding 10) with max_concurrent = 32
    and instant scores: 25 responses take at least (25 - 10) / 10 = 1.5 s of subject time
    (0.95x for timer granularity) and at most 1.5x that + 0.6 s (the limiter paces, it does not
    stall); every response is scored."""
    rng = _rng(3)
    specs = [{"delay": 0.0, "score": 1.0 + i} for i in range(25)]
    manager = s.manager({"max_concurrent": 32, "max_rpm": 600, "timeout": 30.0})
    data, lengths = C.batch(specs, rng)
    rewards, extra, t = C.score_all(manager, data)
    assert s.state()["calls"] == 25
    torch.testing.assert_close(rewards, C.expected_rewards(specs, lengths), rtol=0, atol=0)
    expect = (25 - 10) / 10
    assert t >= 0.95 * expect, f"25 requests at max_rpm=600 took {t:.3f} s < {expect:.2f} s"
    assert t <= 1.5 * expect + 0.6, f"25 requests at max_rpm=600 took {t:.3f} s (expected ~{expect:.2f} s)"


def test_limiters_shared_across_instances(s):
    """Requirement: the limiters are shared by every instance of the class: with max_rpm = 600
    (10 requests/s, a bucket holding 10), a first manager scoring 10 instant responses empties
    the bucket, so a second manager built afterwards with the same config needs at least 0.5 s
    of subject time for its own 10 (about 1 s; a fresh bucket per instance would let them
    through at once)."""
    rng = _rng(7)
    cfg = {"max_concurrent": 16, "max_rpm": 600, "timeout": 30.0}
    specs = [{"delay": 0.0, "score": 1.0 + i} for i in range(10)]
    first = s.manager(cfg)
    data, lengths = C.batch(specs, rng)
    rewards, _, t_first = C.score_all(first, data)
    torch.testing.assert_close(rewards, C.expected_rewards(specs, lengths), rtol=0, atol=0)
    second = s.manager(cfg)
    data, lengths = C.batch(specs, rng)
    rewards, _, t_second = C.score_all(second, data)
    torch.testing.assert_close(rewards, C.expected_rewards(specs, lengths), rtol=0, atol=0)
    assert t_second >= 0.5, f"second instance: 10 requests in {t_second:.3f} s after the first used the bucket ({t_first:.3f} s)"
    assert t_second <= 2.5, f"second instance: 10 requests took {t_second:.3f} s (expected ~1 s)"


def test_tpm_limit_over_a_window(s):
    """Requirement: max_tpm = 24000 (400 tokens/s, a bucket holding 400) with
    estimated_tokens_per_request = 100, a non-binding max_rpm = 60000 and max_concurrent = 32:
    14 instant responses take at least (14 * 100 - 400) / 400 = 2.5 s of subject time (0.95x)
    and at most 1.5x that + 0.6 s."""
    rng = _rng(4)
    specs = [{"delay": 0.0, "score": 2.0 + i} for i in range(14)]
    manager = s.manager({"max_concurrent": 32, "max_rpm": 60000, "max_tpm": 24000,
                         "estimated_tokens_per_request": 100, "timeout": 30.0})
    data, lengths = C.batch(specs, rng)
    rewards, extra, t = C.score_all(manager, data)
    torch.testing.assert_close(rewards, C.expected_rewards(specs, lengths), rtol=0, atol=0)
    expect = (14 * 100 - 400) / 400
    assert t >= 0.95 * expect, f"14 requests at max_tpm=24000 took {t:.3f} s < {expect:.2f} s"
    assert t <= 1.5 * expect + 0.6, f"14 requests at max_tpm=24000 took {t:.3f} s (expected ~{expect:.2f} s)"


def test_timeout_and_error_fallbacks_free_their_slot(s):
    """Requirement: with max_concurrent = 2 and timeout = 0.3 s, a compute_score still running
    after the timeout gives reward 0.0 with reward_extra_info timeout=True and acc=0.0, and is
    cancelled; one that raises gives 0.0 with an "error" entry and acc=0.0; the others keep
    their scores. Neither fallback leaks a concurrency slot: a second batch on the same manager
    still runs exactly 2 at a time and finishes."""
    rng = _rng(5)
    kinds = ["slow"] * 4 + ["raise"] + ["ok"] * 5
    order = rng.permutation(len(kinds))
    specs = []
    for k in (kinds[i] for i in order):
        if k == "slow":
            specs.append({"delay": 5.0, "score": 9.0, "expect": 0.0})
        elif k == "raise":
            specs.append({"delay": 0.02, "mode": "raise", "score": 9.0, "expect": 0.0})
        else:
            specs.append({"delay": 0.05, "score": float(rng.integers(1, 50))})
    manager = s.manager({"max_concurrent": 2, "timeout": 0.3})
    data, lengths = C.batch(specs, rng)
    rewards, extra, t1 = C.score_all(manager, data)
    st = s.state()
    assert st["max_in_flight"] <= 2, st
    assert st["in_flight"] == 0 and st["cancelled"] == 4, f"timed-out scores not cancelled: {st}"
    torch.testing.assert_close(rewards, C.expected_rewards(specs, lengths), rtol=0, atol=0)
    assert extra["acc"] == [sp["expect"] if "expect" in sp else sp["score"] for sp in specs]
    assert extra.get("timeout") == [True] * 4, extra.get("timeout")
    assert len(extra.get("error", [])) == 1

    s.scores.reset()
    specs2 = [{"delay": 0.1, "score": 3.0 + i} for i in range(6)]
    data2, lengths2 = C.batch(specs2, rng)
    rewards2, extra2, t2 = C.score_all(manager, data2)
    st = s.state()
    assert st["calls"] == 6 and st["max_in_flight"] == 2, f"after timeouts: {st}"
    torch.testing.assert_close(rewards2, C.expected_rewards(specs2, lengths2), rtol=0, atol=0)


def test_reward_function_without_kwargs(s):
    """Requirement: a user's async compute_score(data_source, solution_str, ground_truth,
    extra_info) with no **kwargs is called with only those four arguments when the manager has
    no reward_router_address (upstream fix #4310), so it scores normally (no "error" entry); a
    compute_score returning a dict gives dict["score"] as the reward and every dict entry in
    reward_extra_info."""
    rng = _rng(6)
    specs = [{"delay": 0.01, "score": 4.0 + i} for i in range(4)]
    manager = s.manager({"max_concurrent": 4, "timeout": 30.0}, compute_score="score_plain")
    data, lengths = C.batch(specs, rng)
    rewards, extra, _ = C.score_all(manager, data)
    assert "error" not in extra, "compute_score without **kwargs failed"
    torch.testing.assert_close(rewards, C.expected_rewards(specs, lengths), rtol=0, atol=0)

    s.scores.reset()
    C.limited.RateLimitedRewardLoopManager._class_initialized = False
    specs = [{"delay": 0.01, "mode": "dict", "score": 0.25 * i, "label": f"l{i}"} for i in range(5)]
    manager = s.manager({"max_concurrent": 2, "timeout": 30.0})
    data, lengths = C.batch(specs, rng)
    rewards, extra, _ = C.score_all(manager, data)
    torch.testing.assert_close(rewards, C.expected_rewards(specs, lengths), rtol=0, atol=0)
    assert extra.get("score") == [sp["score"] for sp in specs]
    assert extra.get("label") == [sp["label"] for sp in specs]


def test_decoding_and_precomputed_scores(s):
    """Requirement: solution_str is the decoding of the valid response ids with
    skip_special_tokens=True (the stand-in tokenizer writes special ids as <sN> unless told to
    skip them), so responses holding special tokens score normally. A batch that already holds
    "rm_scores" gets them back as they are, with no compute_score call: the tensor itself, or
    with return_dict=True as reward_tensor, reward_extra_info holding the non-tensor columns
    meta_info["reward_extra_keys"] names."""
    rng = _rng(8)
    specs = [{"delay": 0.0, "score": 1.5 + i} for i in range(7)]
    manager = s.manager({"max_concurrent": 4, "timeout": 30.0})
    data, lengths = C.batch(specs, rng, special=True)
    rewards, extra, _ = C.score_all(manager, data)
    torch.testing.assert_close(rewards, C.expected_rewards(specs, lengths), rtol=0, atol=0)
    assert extra["acc"] == [sp["score"] for sp in specs]

    s.scores.reset()
    rm_scores = torch.from_numpy(rng.normal(size=(5, 6))).float()
    labels = [f"judge-{int(v)}" for v in rng.integers(0, 1000, size=5)]
    data, _ = C.batch(
        [{"delay": 0.0, "score": 1.0}] * 5, rng, tensors={"rm_scores": rm_scores},
        non_tensors={"label": labels}, meta_info={"reward_extra_keys": ["label"]},
    )
    plain = manager(data)
    torch.testing.assert_close(plain, rm_scores, rtol=0, atol=0)
    out = manager(data, return_dict=True)
    torch.testing.assert_close(out["reward_tensor"], rm_scores, rtol=0, atol=0)
    assert [str(v) for v in out["reward_extra_info"]["label"]] == labels
    assert s.state()["calls"] == 0, "compute_score ran on a batch that holds rm_scores"
