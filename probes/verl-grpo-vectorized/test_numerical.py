"""Numerical probes: the vectorised GRPO estimator and the group-wise helpers agree with an
independent float64 GRPO written from the definition, on the inputs production feeds them
(uuid-string uids in a numpy object array, singleton groups, int64 masks, strided views)."""
# INFRADEV-PROBE-CANARY-90e2a2fce621

import uuid
import zlib

import numpy as np
import pytest
import torch
from infradev_probe import subject

from _ref import grpo_reference, make_batch

PROBE_SECRET = "PROBE-SECRET-grpo-numerical-c4e0"
SEED = zlib.crc32(PROBE_SECRET.encode())

# The submission lives in the subject sandbox: tensors and numpy arrays (numeric, and object
# arrays of strings) cross by value both ways, so every check below runs here, on copies.
core_algos = subject.module("verl.trainer.ppo.core_algos")
verl_utils = subject.module("verl.utils")
remote_torch = subject.module("torch")
remote_operator = subject.module("operator")

# Tolerances: the estimator computes in float32 (rewards are float32 in the trainer). Scores
# are sums of <= 48 float32 values of magnitude ~1, group sizes <= 9 and every non-constant
# group has std >= ~0.05 (checked below), so float32 rounding moves an advantage by < 1e-5
# absolute; 2e-4 absolute + 1e-4 relative leaves > 10x headroom and still catches a wrong
# convention (biased std changes values by >= 6%, a missing epsilon is not the issue here).
ATOL = 2e-4
RTOL = 1e-4


def _pair(out):
    """The estimator's (advantages, returns), checked to have crossed back as real tensors."""
    assert isinstance(out, (tuple, list)) and len(out) == 2, "an estimator returns (advantages, returns)"
    adv, ret = out
    assert isinstance(adv, torch.Tensor) and isinstance(ret, torch.Tensor)
    return adv, ret


def _remote_view(base, key):
    """A view ``base[key]`` that lives in the subject (a copy crosses as a contiguous tensor,
    so strided inputs have to be built there)."""
    return subject.keep(remote_operator.getitem, subject.put(base), key)


def _uuid_labels(rng):
    return lambda g: str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | g, version=4))


def _sizes(rng, n_groups):
    # mostly GRPO rollouts of n=2..8, plus ~20% singleton groups (filtered / dropped samples)
    sizes = rng.integers(2, 9, size=n_groups)
    sizes[rng.random(n_groups) < 0.2] = 1
    return [int(s) for s in sizes]


@pytest.mark.parametrize("norm", [True, False])
def test_matches_independent_grpo_with_uuid_uids(norm):
    """Requirement: `compute_grpo_vectorized_outcome_advantage`, called the way the trainer
    calls registered estimators (from a process that is not under pytest, as every probe here
    calls the subject; `get_adv_estimator_fn("grpo_vectorized")` with keyword
    arguments token_level_rewards, response_mask, config=None and index = a numpy object array
    of uuid strings), returns (advantages, returns) equal to an independent float64 GRPO:
    per-group mean and Bessel std, singleton groups with mean 0 / std 1, division by
    (std + epsilon) only when norm_adv_by_std_in_grpo is True. Advantages and returns are the
    same tensor values, shaped (bs, response_length), float32, and exactly 0 on masked tokens.

    The official test uses only int64 numpy labels, groups of >= 2 members and the default
    norm_adv_by_std_in_grpo=True, and compares against the loop estimator rather than the
    definition."""
    rng = np.random.default_rng(SEED + int(norm))
    sizes = _sizes(rng, 300)
    rewards, mask, labels = make_batch(rng, sizes, seq_len=48, label_fn=_uuid_labels(rng))
    uid = np.array(labels, dtype=object)

    fn = core_algos.get_adv_estimator_fn("grpo_vectorized")
    kwargs = dict(
        token_level_rewards=torch.from_numpy(rewards),
        response_mask=torch.from_numpy(mask),
        config=None,
        index=uid,
    )
    if not norm:
        kwargs["norm_adv_by_std_in_grpo"] = False
    adv, ret = _pair(fn(**kwargs))

    expected = grpo_reference(rewards, mask, labels, norm=norm)
    assert adv.shape == ret.shape == rewards.shape
    assert adv.dtype == torch.float32
    assert torch.isfinite(adv).all()
    np.testing.assert_allclose(adv.numpy(), expected, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(ret.numpy(), expected, atol=ATOL, rtol=RTOL)
    assert (adv[torch.from_numpy(mask) == 0] == 0).all(), "masked tokens must be exactly 0"
    assert (ret[torch.from_numpy(mask) == 0] == 0).all(), "masked tokens must be exactly 0"
    # singleton groups: the advantage is the score itself (mean 0, std 1), not 0
    singles = [i for i, lab in enumerate(labels) if labels.count(lab) == 1]
    assert len(singles) > 10
    scores = rewards.sum(-1)
    for i in singles[:10]:
        want = scores[i] / (1 + 1e-6) if norm else scores[i]
        last = int(mask[i].sum()) - 1
        assert abs(float(adv[i, last]) - want) < ATOL


def test_constant_groups_are_finite_and_zero():
    """Requirement: a group whose members all got the same reward (all correct / all wrong,
    the common case with binary rewards) gets advantage 0 and never NaN or inf, with or without
    std normalisation; the other groups in the same batch are unaffected.

    The official test draws Gaussian rewards, so no group ever has zero variance."""
    rng = np.random.default_rng(SEED + 7)
    bs, seq_len, n = 120, 16, 8
    labels = [f"prompt-{i // n}" for i in range(bs)]
    perm = rng.permutation(bs)
    labels = [labels[p] for p in perm]
    mask = np.ones((bs, seq_len), dtype=np.float32)
    mask[:, 10:] = 0
    rewards = np.zeros((bs, seq_len), dtype=np.float32)
    # 0.9, 1.3 and 3.7 repeated 8 times: float32 sums whose one-pass variance comes out
    # slightly negative, which must not become NaN.
    values = [0.0, 1.0, 0.7, -0.3, 5.0, 1e-3, 0.9, 1.3, 3.7]
    group_value = {f"prompt-{g}": v for g, v in enumerate(values)}
    for i, lab in enumerate(labels):
        if lab in group_value:
            rewards[i, 9] = group_value[lab]
        else:  # two binary-reward groups with mixed outcomes
            rewards[i, 9] = float(rng.integers(0, 2))
    for lab in ("prompt-9", "prompt-10"):  # make sure the mixed groups are really mixed
        idx = [i for i, l in enumerate(labels) if l == lab]
        rewards[idx[0], 9], rewards[idx[1], 9] = 0.0, 1.0
    uid = np.array(labels, dtype=object)
    for norm in (True, False):
        adv, ret = _pair(core_algos.compute_grpo_vectorized_outcome_advantage(
            token_level_rewards=torch.from_numpy(rewards),
            response_mask=torch.from_numpy(mask),
            index=uid,
            norm_adv_by_std_in_grpo=norm,
        ))
        assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
        for i, lab in enumerate(labels):
            if lab in group_value:
                # float32 rounding of the group mean is <= 1 ulp of |5.0| (~5e-7); divided by a
                # floored std it must still be far below any meaningful advantage (1e-3).
                assert float(adv[i].abs().max()) <= 1e-3, (lab, norm, adv[i].abs().max())
        expected = grpo_reference(rewards, mask, labels, norm=norm)
        mixed = [i for i, lab in enumerate(labels) if lab not in group_value]
        np.testing.assert_allclose(adv.numpy()[mixed], expected[mixed], atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("epsilon", [None, 1e-7])
def test_small_spread_groups_divide_by_sigma_plus_epsilon(epsilon):
    """Requirement: with std normalisation, each advantage is (score - mean) / (std + epsilon)
    with the caller's `epsilon` (the default 1e-6, and 1e-7), also for groups whose spread is
    small but whose variance is above the eps floor the prompt allows (scores a few thousandths
    apart, variances >= 1.9e-6, all exactly representable in float32, so float32 rounding moves
    an advantage by < 1e-6 relative, and epsilon by >= 7e-5).

    The probes and official tests above use groups with std >= ~0.05, where epsilon changes an
    advantage by < 2e-5: an estimator that drops epsilon, subtracts it, or ignores the
    caller's value agrees with them."""
    rng = np.random.default_rng(SEED + 11)
    step = 2.0 ** -9
    groups = [
        [0.0, 2 * step],                    # std = 2**-8 / sqrt(2)
        [0.0, step],                        # variance 2**-19 = 1.9e-6, just above 1e-6
        [-4 * step, 0.0, 4 * step],         # std = 2**-7
        [step, 3 * step, 3 * step, 5 * step],
        [-step, step, 0.0, -2 * step, 2 * step],
    ] * 4
    labels, values = [], []
    for g, members in enumerate(groups):
        for v in members:
            labels.append(f"small-{g}")
            values.append(v)
    order = rng.permutation(len(values))
    labels = [labels[i] for i in order]
    seq_len = 6
    rewards = np.zeros((len(values), seq_len), dtype=np.float32)
    mask = np.zeros((len(values), seq_len), dtype=np.float32)
    for row, i in enumerate(order):
        length = int(rng.integers(1, seq_len + 1))
        mask[row, :length] = 1
        rewards[row, length - 1] = values[i]
    kwargs = dict(
        token_level_rewards=torch.from_numpy(rewards),
        response_mask=torch.from_numpy(mask),
        index=np.array(labels, dtype=object),
    )
    if epsilon is not None:
        kwargs["epsilon"] = epsilon
    adv, ret = _pair(core_algos.compute_grpo_vectorized_outcome_advantage(**kwargs))
    expected = grpo_reference(rewards, mask, labels, epsilon=epsilon or 1e-6, norm=True)
    assert torch.isfinite(adv).all()
    np.testing.assert_allclose(adv.numpy(), expected, atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(ret.numpy(), expected, atol=1e-6, rtol=1e-5)


def test_strided_inputs_int_mask_and_no_mutation():
    """Requirement: the estimator accepts non-contiguous views (a column slice of a wider
    reward buffer, a transposed-back mask) and the int64 response mask the trainer derives from
    the attention mask, returns float32 advantages equal to the reference, and does not modify
    its inputs in place.

    The official test passes freshly allocated contiguous float tensors only."""
    rng = np.random.default_rng(SEED + 11)
    sizes = _sizes(rng, 64)
    rewards, mask, labels = make_batch(rng, sizes, seq_len=24, label_fn=lambda g: f"q{g:04d}")
    bs = rewards.shape[0]
    wide = torch.zeros(bs, 3 * 24)
    wide[:, ::3] = torch.from_numpy(rewards)
    # In the subject: a column slice of a wider reward buffer, and an int64 mask whose storage
    # is transposed (the views the trainer's TensorDict slices hand over).
    rew_view = _remote_view(wide, (slice(None), slice(None, None, 3)))
    mask_t = torch.from_numpy(np.ascontiguousarray(mask.astype(np.int64).T))
    mask_view = subject.keep(remote_torch.t, subject.put(mask_t))
    assert rew_view.is_contiguous() is False and mask_view.is_contiguous() is False
    assert tuple(rew_view.stride()) == (72, 3) and tuple(mask_view.stride()) == (1, bs)
    assert mask_view.dtype == torch.int64
    rew_before, mask_before = torch.from_numpy(rewards), torch.from_numpy(mask.astype(np.int64))

    adv, ret = _pair(core_algos.compute_grpo_vectorized_outcome_advantage(
        token_level_rewards=rew_view,
        response_mask=mask_view,
        index=np.array(labels, dtype=object),
    ))
    assert torch.equal(subject.fetch(rew_view), rew_before), "token_level_rewards was modified"
    assert torch.equal(subject.fetch(mask_view), mask_before), "response_mask was modified"
    assert adv.dtype == torch.float32 and adv.shape == (bs, 24)
    expected = grpo_reference(rewards, mask, labels)
    np.testing.assert_allclose(adv.numpy(), expected, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(ret.numpy(), expected, atol=ATOL, rtol=RTOL)
    assert (adv[mask_before == 0] == 0).all()


def test_group_helpers_match_definition():
    """Requirement: `verl.utils.as_torch_index(index)` maps labels (numpy object array of uuid
    strings, Python list of strings, numpy int64 array, torch int32 tensor, torch int64 tensor
    of hashes near 2**62, torch float64 tensor of integers near 2**40, torch float32 tensor of
    non-integer values) to a 1-D torch.long
    tensor of non-negative ids with equal ids exactly for equal labels; and
    `verl.utils.group_mean_std(scores, gidx, eps)` returns (mean_g, std_g, count_g), float32
    tensors of length max(gidx) + 1, holding each group's count, mean and Bessel-corrected std,
    with mean 0 / std 1 for groups of fewer than 2 members (count 0 for ids no label has), and
    three empty float32 tensors for empty input.

    The official helper tests use 3-6 hand-written labels and a single 2-member group."""
    rng = np.random.default_rng(SEED + 23)
    n = 500
    base = rng.integers(0, 120, size=n)
    uuids = [str(uuid.UUID(int=int(x) * 7919 + 12345, version=4)) for x in range(120)]
    variants = {
        "object uuids": np.array([uuids[b] for b in base], dtype=object),
        "list of str": [f"prompt/{b}" for b in base],
        "numpy int64": base.astype(np.int64),
        "torch int": torch.from_numpy(base.astype(np.int32)),
        # hashed uids: int64 labels far beyond float64's exact integers must stay distinct
        "torch int64 hashes": torch.from_numpy(base.astype(np.int64) * 7919 + 2**62),
        # integer-valued float64 labels beyond float32's exact integers
        "torch float64 ids": torch.from_numpy(base.astype(np.float64) * 3 + 2.0**40),
        # non-integer float labels (no two equal labels may be rounded together)
        "torch float32 scores": torch.from_numpy((base / 7.0 + 0.125).astype(np.float32)),
    }
    for name, labels in variants.items():
        g = verl_utils.as_torch_index(labels)
        assert isinstance(g, torch.Tensor) and g.dtype == torch.long and g.dim() == 1, name
        assert g.numel() == n and int(g.min()) >= 0, name
        same_label = base[:, None] == base[None, :]
        same_id = (g[:, None] == g[None, :]).numpy()
        assert (same_label == same_id).all(), f"{name}: ids must partition exactly like the labels"

    # Group ids with gaps: the missing groups have 0 members (mean 0, std 1, count 0).
    gaps = verl_utils.group_mean_std(
        torch.tensor([1.0, 2.0, 4.0, 3.0, 5.0, 7.0]), torch.tensor([0, 2, 2, 5, 5, 5]), eps=1e-6)
    mean_g, std_g, cnt_g = gaps
    assert cnt_g.tolist() == [1.0, 0.0, 2.0, 0.0, 0.0, 3.0], cnt_g
    assert [mean_g[k].item() for k in (0, 1, 3, 4)] == [0.0] * 4
    assert [std_g[k].item() for k in (0, 1, 3, 4)] == [1.0] * 4
    assert abs(mean_g[2].item() - 3.0) < 1e-6 and abs(mean_g[5].item() - 5.0) < 1e-6
    assert abs(std_g[5].item() - 2.0) < 1e-5

    # Empty input: three empty float32 tensors.
    empty = verl_utils.group_mean_std(torch.zeros(0), torch.zeros(0, dtype=torch.long), eps=1e-6)
    assert isinstance(empty, (tuple, list)) and len(empty) == 3
    for t in empty:
        assert t.shape == (0,) and t.dtype == torch.float32, "empty input: empty float32 tensors"

    gidx = verl_utils.as_torch_index(variants["object uuids"])
    scores = torch.from_numpy(rng.normal(loc=0.5, scale=2.0, size=n).astype(np.float32))
    out = verl_utils.group_mean_std(scores, gidx, eps=1e-6)
    assert isinstance(out, (tuple, list)) and len(out) == 3
    mean_g, std_g, cnt_g = out
    G = int(gidx.max()) + 1
    for t in (mean_g, std_g, cnt_g):
        assert t.shape == (G,) and t.dtype == torch.float32
    s64 = scores.double().numpy()
    gi = gidx.numpy()
    for k in range(G):
        vals = s64[gi == k]
        assert float(cnt_g[k]) == len(vals)
        if len(vals) < 2:
            assert float(mean_g[k]) == 0.0 and float(std_g[k]) == 1.0
        else:
            assert abs(float(mean_g[k]) - vals.mean()) <= 1e-5 * (1 + abs(vals.mean()))
            assert abs(float(std_g[k]) - vals.std(ddof=1)) <= 1e-4 * (1 + vals.std(ddof=1))
