"""Numerical probes: the vectorised RLOO estimator agrees with the loop estimator (where the
two are meant to agree) and with an independent float64 RLOO written from the definition, on
the inputs production feeds it (uuid-string uids in a numpy object array, singleton groups,
non-contiguous uid arrays, int64/bool masks, strided views)."""
# INFRADEV-PROBE-CANARY-3c9e51d0a7b4

import uuid

import numpy as np
import pytest
import torch
from infradev_probe import subject, workload_seed

from _ref import group_sizes, make_batch, rloo_reference

PROBE_SECRET = "PROBE-SECRET-rloo-numerical-5b17"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

# The submission lives in the subject sandbox: tensors and numpy arrays (numeric, and object
# arrays of strings) cross by value both ways, so every check below runs here, on copies.
core_algos = subject.module("verl.trainer.ppo.core_algos")
remote_torch = subject.module("torch")
remote_operator = subject.module("operator")
remote_numpy = subject.module("numpy")

# Against the loop estimator (float32 both): the official test's tolerance, atol 1e-6 and
# rtol 1e-5. Scores are sums of <= 48 float32 values of magnitude ~1 and groups have <= 8
# members, so the two float32 formulas differ by a few ulps of |advantage|, inside rtol.
# Against the float64 definition: 1e-5 absolute + 1e-5 relative (float32 rounding of the
# scores is ~1e-6; a wrong baseline, e.g. the mean including the response itself, is off by
# |score - mean| / (n - 1), orders of magnitude more).
LOOP_ATOL, LOOP_RTOL = 1e-6, 1e-5
REF_ATOL, REF_RTOL = 1e-5, 1e-5


def _pair(out):
    """The estimator's (advantages, returns), checked to have crossed back as real tensors."""
    assert isinstance(out, (tuple, list)) and len(out) == 2, "an estimator returns (advantages, returns)"
    adv, ret = out
    assert isinstance(adv, torch.Tensor) and isinstance(ret, torch.Tensor)
    return adv, ret


def _uuid_labels(rng):
    return lambda g: str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | g, version=4))


def _check_common(adv, ret, rewards, mask):
    assert adv.shape == ret.shape == rewards.shape, "advantages/returns must be (bs, response_length)"
    assert adv.dtype == torch.float32 and ret.dtype == torch.float32
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all(), "NaN/inf in the advantages"
    assert torch.equal(adv, ret), "advantages and returns must hold the same values"
    pad = torch.from_numpy(np.asarray(mask)) == 0
    assert (adv[pad] == 0).all(), "masked (padding) tokens must be exactly 0"


def test_matches_loop_rloo_with_uuid_uids():
    """Requirement: `compute_rloo_vectorized_outcome_advantage`, reached the way the trainer
    reaches registered estimators (`get_adv_estimator_fn("rloo_vectorized")`, keyword arguments
    token_level_rewards, response_mask, config=None, index = a numpy object array of uuid
    strings), returns (advantages, returns) equal to the loop estimator
    `compute_rloo_outcome_advantage` on the same batch to 1e-6 (+1e-5 relative) and to an
    independent float64 RLOO; float32, shape (bs, response_length), returns == advantages,
    padding tokens exactly 0.

    The official test uses int64 numpy labels only, and calls the function directly."""
    rng = np.random.default_rng(SEED)
    sizes = group_sizes(rng, 300, singletons=0.0)
    rewards, mask, labels = make_batch(rng, sizes, seq_len=48, label_fn=_uuid_labels(rng))
    uid = np.array(labels, dtype=object)
    kwargs = dict(token_level_rewards=torch.from_numpy(rewards), response_mask=torch.from_numpy(mask),
                  config=None, index=uid)

    fn = core_algos.get_adv_estimator_fn("rloo_vectorized")
    adv, ret = _pair(fn(**kwargs))
    _check_common(adv, ret, rewards, mask)
    loop_adv, _ = _pair(core_algos.compute_rloo_outcome_advantage(**kwargs))
    torch.testing.assert_close(adv, loop_adv.float(), atol=LOOP_ATOL, rtol=LOOP_RTOL)
    np.testing.assert_allclose(adv.numpy(), rloo_reference(rewards, mask, labels), atol=REF_ATOL, rtol=REF_RTOL)


def test_singleton_groups_get_zero():
    """Requirement: a response alone in its group (no leave-one-out baseline) gets advantage
    exactly 0 on every token, never NaN/inf; the other groups of the same batch still equal the
    loop estimator and the float64 definition. Also a batch whose labels are all distinct gives
    all zeros, and a batch that is one group gives the plain leave-one-out advantage.

    The official test builds every group with >= 2 members, so a division by (n - 1) that is
    not guarded for n = 1 passes it."""
    rng = np.random.default_rng(SEED + 1)
    sizes = group_sizes(rng, 200, singletons=0.3)
    rewards, mask, labels = make_batch(rng, sizes, seq_len=32, label_fn=lambda g: f"prompt-{g:05d}")
    uid = np.array(labels, dtype=object)
    kwargs = dict(token_level_rewards=torch.from_numpy(rewards), response_mask=torch.from_numpy(mask), index=uid)
    adv, ret = _pair(core_algos.compute_rloo_vectorized_outcome_advantage(**kwargs))
    _check_common(adv, ret, rewards, mask)
    single = np.array([labels.count(lab) == 1 for lab in labels])
    assert single.sum() > 30 and (~single).sum() > 300
    assert (adv[torch.from_numpy(single)] == 0).all(), "a singleton group's advantage must be 0"
    loop_adv, _ = _pair(core_algos.compute_rloo_outcome_advantage(**kwargs))
    multi = torch.from_numpy(~single)
    torch.testing.assert_close(adv[multi], loop_adv[multi].float(), atol=LOOP_ATOL, rtol=LOOP_RTOL)
    np.testing.assert_allclose(adv.numpy(), rloo_reference(rewards, mask, labels), atol=REF_ATOL, rtol=REF_RTOL)

    # every label distinct: all zeros
    distinct = np.array([f"u{i}" for i in range(len(labels))], dtype=object)
    adv, _ = _pair(core_algos.compute_rloo_vectorized_outcome_advantage(
        token_level_rewards=torch.from_numpy(rewards), response_mask=torch.from_numpy(mask), index=distinct))
    assert torch.isfinite(adv).all() and (adv == 0).all(), "all-singleton batch: all advantages 0"

    # one group of 7: score_i - mean of the other six
    r7, m7 = rewards[:7], mask[:7]
    adv, _ = _pair(core_algos.compute_rloo_vectorized_outcome_advantage(
        token_level_rewards=torch.from_numpy(r7), response_mask=torch.from_numpy(m7),
        index=np.array(["only"] * 7, dtype=object)))
    np.testing.assert_allclose(adv.numpy(), rloo_reference(r7, m7, ["only"] * 7), atol=REF_ATOL, rtol=REF_RTOL)


def test_index_forms_and_noncontiguous_uids():
    """Requirement: the group labels may come as a numpy object array of strings, a
    non-contiguous (strided or reversed) numpy view, a numpy unicode array, a Python list of
    strings or a numpy int64 array of large hashed ids: every form of the same partition gives
    the same advantages, equal to the float64 definition (groups are formed by label equality
    only; label order and values do not matter).

    The official test passes a freshly built contiguous int64 array of ids 0..G-1."""
    rng = np.random.default_rng(SEED + 2)
    sizes = group_sizes(rng, 150, singletons=0.15)
    rewards, mask, gids = make_batch(rng, sizes, seq_len=24, label_fn=lambda g: g)
    bs = len(gids)
    expected = rloo_reference(rewards, mask, gids)
    gids = np.asarray(gids, dtype=np.int64)
    names = [str(uuid.UUID(int=int(rng.integers(0, 2**62)) * 1024 + g, version=4)) for g in range(len(sizes))]
    strs = [names[g] for g in gids]

    # Built in the subject: a copy crosses as a contiguous array, so views are made there.
    doubled = np.empty(2 * bs, dtype=object)
    doubled[::2] = strs
    doubled[1::2] = [f"pad-{i}" for i in range(bs)]
    strided = subject.keep(remote_operator.getitem, subject.put(doubled), slice(None, None, 2))
    rev_ids = (gids * 7919 + 2**62)[::-1].copy()
    reversed_view = subject.keep(remote_operator.getitem, subject.put(rev_ids), slice(None, None, -1))
    assert strided.flags.c_contiguous is False and reversed_view.flags.c_contiguous is False

    forms = {
        "object array of uuid strings": np.array(strs, dtype=object),
        "strided object view": strided,
        "numpy unicode array": subject.keep(remote_numpy.asarray, list(strs)),  # '<U36' (made there)
        "python list of str": list(strs),
        "reversed int64 view of hashed ids": reversed_view,
    }
    rew_t, mask_t = torch.from_numpy(rewards), torch.from_numpy(mask)
    for name, index in forms.items():
        adv, ret = _pair(core_algos.compute_rloo_vectorized_outcome_advantage(
            token_level_rewards=rew_t, response_mask=mask_t, index=index))
        _check_common(adv, ret, rewards, mask)
        np.testing.assert_allclose(adv.numpy(), expected, atol=REF_ATOL, rtol=REF_RTOL, err_msg=name)


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.bool])
def test_strided_inputs_mask_dtypes_and_no_mutation(mask_dtype):
    """Requirement: the estimator accepts non-contiguous views (a column slice of a wider
    reward buffer, a transposed-back mask) and an int64 or bool response mask (the trainer
    derives it from the attention mask), returns float32 advantages equal to the definition with
    padding exactly 0, and does not modify its inputs in place.

    The official test passes freshly allocated contiguous float tensors only."""
    rng = np.random.default_rng(SEED + 3)
    sizes = group_sizes(rng, 80, singletons=0.2)
    rewards, mask, labels = make_batch(rng, sizes, seq_len=20, label_fn=lambda g: f"q{g:04d}")
    bs = rewards.shape[0]
    wide = torch.zeros(bs, 3 * 20)
    wide[:, ::3] = torch.from_numpy(rewards)
    rew_view = subject.keep(remote_operator.getitem, subject.put(wide), (slice(None), slice(None, None, 3)))
    mask_np = mask.astype(np.int64) if mask_dtype == torch.int64 else mask.astype(bool)
    mask_t = torch.from_numpy(np.ascontiguousarray(mask_np.T))
    mask_view = subject.keep(remote_torch.t, subject.put(mask_t))
    assert rew_view.is_contiguous() is False and mask_view.is_contiguous() is False
    assert mask_view.dtype == mask_dtype
    rew_before, mask_before = torch.from_numpy(rewards), torch.from_numpy(mask_np)

    adv, ret = _pair(core_algos.compute_rloo_vectorized_outcome_advantage(
        token_level_rewards=rew_view, response_mask=mask_view, index=np.array(labels, dtype=object)))
    assert torch.equal(subject.fetch(rew_view), rew_before), "token_level_rewards was modified"
    assert torch.equal(subject.fetch(mask_view), mask_before), "response_mask was modified"
    _check_common(adv, ret, rewards, mask)
    np.testing.assert_allclose(adv.numpy(), rloo_reference(rewards, mask, labels), atol=REF_ATOL, rtol=REF_RTOL)
