"""Numerical probes of `agg_loss(..., loss_scale_factor=...)`: a constant normaliser for
"seq-mean-token-sum-norm" that does not move with the batch's padded response length, the old
divisor when it is None, and no effect on the other aggregation modes. Every expected value is
computed here, in float64, from the definition in the prompt (_ref.py)."""
# INFRADEV-PROBE-CANARY-7d2a4f19c0e6

import numpy as np
import pytest
import torch
from infradev_probe import subject, workload_seed

from _ref import agg_model, make_batch, scale_of

PROBE_SECRET = "PROBE-SECRET-loss-scale-agg-4e81"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

core_algos = subject.module("verl.trainer.ppo.core_algos")

MODE = "seq-mean-token-sum-norm"
# float32: a masked sum of a few thousand terms is exact to ~1e-7 of sum|x| (pairwise / vectorised
# float32 accumulation); 2e-6 of sum|x| (divided by the divisor) leaves room and is still ~1e4
# times smaller than the smallest wrong divisor tried here changes the result (>= 1 %).
F32_REL = 2e-6
# bfloat16: the inputs are rounded to bf16 here too, so only the kernel's own roundings count (a
# few roundings at 2^-8 relative on a sum of positive terms): 3e-2 relative. The wrong divisors
# below are off by >= 25 % in the bf16 cases.
BF16_REL = 3e-2


def _scalar(out):
    assert isinstance(out, torch.Tensor), "agg_loss returns a torch.Tensor"
    assert out.dim() == 0, "agg_loss returns a scalar tensor"
    return float(out.double())


def _agg(x, mask, mode=MODE, **kw):
    return _scalar(core_algos.agg_loss(loss_mat=x, loss_mask=mask, loss_agg_mode=mode, **kw))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_factor_replaces_padded_length_divisor(dtype):
    """Requirement: with loss_agg_mode "seq-mean-token-sum-norm" and an integer
    `loss_scale_factor=F`, `agg_loss` returns sum over every sequence and token of
    loss_mat * loss_mask, divided by F (not by loss_mask.shape[-1]); a 0-dim tensor. Checked on
    random shapes (1-24 sequences, 1-300 padded tokens, fully masked rows included), factors
    smaller, equal to and larger than the padded length, float32 loss matrices with float32
    masks (tolerance 2e-6 of sum|x| / F) and bfloat16 loss matrices with bool masks (3e-2
    relative, positive terms), against a float64 model of the definition.

    The upstream change ships no test of agg_loss at all (only config files changed)."""
    rng = np.random.default_rng(SEED + (0 if dtype == "float32" else 1))
    agg = core_algos.agg_loss
    for case in range(14):
        bs = int(rng.integers(1, 25))
        length = int(rng.integers(1, 301))
        x, mask = make_batch(rng, bs, length, positive=(dtype == "bfloat16"))
        factor = int([1, 7, length, 4096, rng.integers(2, 2000)][case % 5])
        if factor == length:
            factor += 3  # never the padded length itself: that would hide the old divisor
        if dtype == "float32":
            xt, mt = torch.from_numpy(x), torch.from_numpy(mask)
            xs = x
            tol = F32_REL * scale_of(x, mask) / factor + 1e-30
        else:
            xt = torch.from_numpy(x).to(torch.bfloat16)
            mt = torch.from_numpy(mask).bool()
            xs = xt.float().numpy()
            tol = BF16_REL * abs(agg_model(xs, mask, MODE, factor=factor)) + 1e-30
        got = _scalar(agg(loss_mat=xt, loss_mask=mt, loss_agg_mode=MODE, loss_scale_factor=factor))
        want = agg_model(xs, mask, MODE, factor=factor)
        assert abs(got - want) <= tol, (case, bs, length, factor)


def test_padding_columns_do_not_change_the_loss():
    """Requirement: with a loss_scale_factor, "seq-mean-token-sum-norm" does not depend on how
    far the batch is right-padded: appending 1-200 columns of padding (mask 0, arbitrary finite
    loss values, as large as 1e4) leaves the loss unchanged to float32 rounding (2e-6 of
    sum|x| / F), and so does cutting the padding down to the longest response. Without a factor
    the divisor is the padded length, so the same loss changes by the ratio of lengths.

    The point of the feature: a divisor that is constant throughout training. No upstream test
    exercises it."""
    rng = np.random.default_rng(SEED + 2)
    for case in range(10):
        bs, length = int(rng.integers(2, 17)), int(rng.integers(4, 200))
        x, mask = make_batch(rng, bs, length)
        factor = int(rng.integers(16, 3000))
        tol = F32_REL * scale_of(x, mask) / factor + 1e-30
        base = _agg(torch.from_numpy(x), torch.from_numpy(mask), loss_scale_factor=factor)
        extra = int(rng.integers(1, 201))
        xp = np.concatenate([x, rng.uniform(-1e4, 1e4, size=(bs, extra)).astype(np.float32)], axis=1)
        mp = np.concatenate([mask, np.zeros((bs, extra), np.float32)], axis=1)
        padded = _agg(torch.from_numpy(xp), torch.from_numpy(mp), loss_scale_factor=factor)
        assert abs(padded - base) <= tol, ("padding changed the loss", case, length, extra)
        longest = max(int(mask.sum(-1).max()), 1)
        trimmed = _agg(torch.from_numpy(np.ascontiguousarray(x[:, :longest])),
                       torch.from_numpy(np.ascontiguousarray(mask[:, :longest])), loss_scale_factor=factor)
        assert abs(trimmed - base) <= tol, ("trimming padding changed the loss", case)
        assert abs(base - agg_model(x, mask, MODE, factor=factor)) <= tol


def test_micro_batches_add_up_to_the_mini_batch():
    """Requirement: a mini-batch split into micro-batches, each right-padded only to its own
    longest response (as dynamic batch sizing does), gives per-micro-batch losses with
    loss_scale_factor=F that add up to the loss of the whole mini-batch with the same F (and to
    the float64 model), to 2e-6 of sum|x| / F. With the per-batch padded length as divisor the
    micro-batches would be weighted by their own lengths.

    No upstream test calls agg_loss with a factor."""
    rng = np.random.default_rng(SEED + 3)
    for case in range(6):
        bs, length = int(rng.integers(6, 33)), int(rng.integers(8, 400))
        x, mask = make_batch(rng, bs, length, empty_rows=False)
        factor = length + int(rng.integers(1, 500))
        tol = F32_REL * scale_of(x, mask) / factor
        whole = _agg(torch.from_numpy(x), torch.from_numpy(mask), loss_scale_factor=factor)
        order = rng.permutation(bs)
        cuts = sorted(set(int(c) for c in rng.integers(1, bs, size=3)))
        total = 0.0
        for part in np.split(order, cuts):
            xm, mm = x[part], mask[part]
            width = int(mm.sum(-1).max())
            total += _agg(torch.from_numpy(np.ascontiguousarray(xm[:, :width])),
                          torch.from_numpy(np.ascontiguousarray(mm[:, :width])), loss_scale_factor=factor)
        assert abs(total - whole) <= tol, case
        assert abs(whole - agg_model(x, mask, MODE, factor=factor)) <= tol, case


def test_none_keeps_the_padded_length_divisor():
    """Requirement: `loss_scale_factor=None` (the default, also when the argument is left out)
    keeps the old "seq-mean-token-sum-norm" result: sum of loss_mat * loss_mask divided by
    loss_mask.shape[-1] (2e-6 of sum|x| / L against the float64 model).

    Catches a rewrite that makes the factor mandatory or changes the default divisor."""
    rng = np.random.default_rng(SEED + 4)
    for case in range(6):
        bs, length = int(rng.integers(1, 20)), int(rng.integers(1, 300))
        x, mask = make_batch(rng, bs, length)
        tol = F32_REL * scale_of(x, mask) / length + 1e-30
        want = agg_model(x, mask, MODE)
        xt, mt = torch.from_numpy(x), torch.from_numpy(mask)
        assert abs(_agg(xt, mt, loss_scale_factor=None) - want) <= tol, case
        assert abs(_agg(xt, mt) - want) <= tol, case


def test_other_modes_ignore_the_factor():
    """Requirement: for "token-mean", "seq-mean-token-sum" and "seq-mean-token-mean" a
    loss_scale_factor changes nothing: the result is identical (bitwise) to the call without it,
    with and without dp_size / batch_num_tokens / global_batch_size, and equals the float64
    model of each mode (1e-5 relative + 1e-6 of sum|x| / count); an unknown mode still raises
    ValueError.

    No upstream test passes a factor to any mode."""
    rng = np.random.default_rng(SEED + 5)
    for case in range(4):
        bs, length = int(rng.integers(3, 20)), int(rng.integers(2, 200))
        x, mask = make_batch(rng, bs, length)
        mask[0, 0] = 1.0  # at least one valid token
        xt, mt = torch.from_numpy(x), torch.from_numpy(mask)
        factor = int(rng.integers(2, 5000))
        extras = [{}, {"dp_size": 4, "batch_num_tokens": int(mask.sum()) * 3 + 1, "global_batch_size": bs * 2 + 1}]
        for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
            for kw in extras:
                plain = core_algos.agg_loss(loss_mat=xt, loss_mask=mt, loss_agg_mode=mode, **kw)
                with_f = core_algos.agg_loss(loss_mat=xt, loss_mask=mt, loss_agg_mode=mode,
                                             loss_scale_factor=factor, **kw)
                assert torch.equal(torch.as_tensor(plain), torch.as_tensor(with_f)), (mode, kw)
                want = agg_model(x, mask, mode, factor=factor, **kw)
                got = float(torch.as_tensor(with_f).double())
                assert abs(got - want) <= 1e-5 * abs(want) + 1e-6 * scale_of(x, mask) + 1e-12, (mode, kw)
    with pytest.raises(ValueError):
        core_algos.agg_loss(loss_mat=xt, loss_mask=mt, loss_agg_mode="seq-sum-token-norm", loss_scale_factor=3)


def test_gradient_is_mask_over_factor():
    """Requirement: the loss is differentiable in loss_mat: after backward() of
    agg_loss(loss_mat, loss_mask, "seq-mean-token-sum-norm", loss_scale_factor=F), the gradient
    of loss_mat is loss_mask / F (zero on padding), in float32 to 1e-6 relative; the mask is
    not modified.

    The training step backpropagates through this loss; no upstream test does."""
    rng = np.random.default_rng(SEED + 6)
    bs, length = 9, 77
    x, mask = make_batch(rng, bs, length)
    factor = int(rng.integers(100, 1000))
    xh = subject.put(torch.from_numpy(x))
    xh.requires_grad_(True)
    mh = subject.put(torch.from_numpy(mask))
    # kept in the subject (a tensor would cross back as a copy, without its graph)
    loss = subject.keep(core_algos.agg_loss, loss_mat=xh, loss_mask=mh, loss_agg_mode=MODE, loss_scale_factor=factor)
    assert loss.dim() == 0 and loss.requires_grad is True
    loss.backward()
    grad = subject.fetch(xh.grad)
    assert isinstance(grad, torch.Tensor) and grad.shape == (bs, length)
    want = mask.astype(np.float64) / factor
    np.testing.assert_allclose(grad.double().numpy(), want, rtol=1e-6, atol=1e-12)
    assert torch.equal(subject.fetch(mh), torch.from_numpy(mask)), "loss_mask was modified"
