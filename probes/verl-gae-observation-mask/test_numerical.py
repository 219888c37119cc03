"""Numerical probes: GAE with observation (mask-0) tokens inside the response equals GAE computed
from the definition on the sequence with those tokens deleted, on inputs shaped like multi-turn
tool-use rollouts (several holes per row, different per row, garbage values/rewards on holes,
strided views, int64 masks, gamma/lambda at their edges)."""
# INFRADEV-PROBE-CANARY-c1b52a57e24d

import zlib

import numpy as np
import pytest
import torch
from infradev_probe import subject

from _ref import gae_reference, make_multi_turn_batch

PROBE_SECRET = "PROBE-SECRET-gae-numerical-9a4c"
SEED = zlib.crc32(PROBE_SECRET.encode())

# The submission lives in the subject sandbox: tensors cross by value both ways, so the
# reference and every comparison run here, on copies of its results.
core_algos = subject.module("verl.trainer.ppo.core_algos")
remote_torch = subject.module("torch")
remote_operator = subject.module("operator")

# Tolerances: the function computes in float32. Per-token |delta| <= ~15 here and a chain has
# <= 64 links, so accumulated float32 rounding in a raw advantage / return is below ~1e-4 even
# with gamma = lam = 1; whitened advantages are O(1) with rounding below ~1e-5. A wrong
# convention (bootstrapping from an observation token's value, letting an observation token's
# TD error leak into the chain, discounting across holes) moves results by O(0.1..1), i.e. more
# than 100x these tolerances.
ATOL = 5e-4
RTOL = 1e-4


def _call(rewards, values, mask, gamma, lam, shape=None):
    """Calls the submission's GAE (arguments: local tensors, sent by value, or handles to
    tensors living in the subject) and returns its results as float64 numpy arrays."""
    out = core_algos.compute_gae_advantage_return(
        token_level_rewards=rewards, values=values, response_mask=mask, gamma=gamma, lam=lam
    )
    assert isinstance(out, (tuple, list)) and len(out) == 2
    adv, ret = out
    assert isinstance(adv, torch.Tensor) and isinstance(ret, torch.Tensor)
    shape = tuple(rewards.shape) if shape is None else shape
    assert tuple(adv.shape) == shape and tuple(ret.shape) == shape
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    return adv.double().numpy(), ret.double().numpy()


def _check(rewards, values, mask, gamma, lam, adv, ret):
    _, ref_ret, ref_white = gae_reference(rewards, values, mask, gamma, lam)
    sel = np.asarray(mask, dtype=np.float64) > 0.5
    np.testing.assert_allclose(ret[sel], ref_ret[sel], atol=ATOL, rtol=RTOL, err_msg="returns")
    np.testing.assert_allclose(adv[sel], ref_white[sel], atol=ATOL, rtol=RTOL, err_msg="advantages")


def test_classic_gae_all_ones_mask():
    """Requirement: with no observation tokens (mask all ones, and rows with only right padding
    whose values are 0, as the trainer masks them) the result is classic GAE: returns =
    A + V, advantages whitened over the mask-1 tokens with the Bessel variance.

    Guards against the masking change breaking the single-turn case; the official test only
    looks at a multi-turn row and compares two calls with each other, never with GAE itself."""
    rng = np.random.default_rng(SEED)
    bs, L = 6, 40
    r = (rng.standard_normal((bs, L)) * 0.3).astype(np.float32)
    v = (rng.standard_normal((bs, L)) * 2.0).astype(np.float32)
    m = np.ones((bs, L), dtype=np.float32)
    for i, n in enumerate([40, 40, 31, 17, 2, 40]):
        m[i, n:] = 0
    r *= m
    v *= m
    for gamma, lam in [(1.0, 0.95), (0.99, 0.95), (0.9, 0.5)]:
        adv, ret = _call(torch.from_numpy(r), torch.from_numpy(v), torch.from_numpy(m), gamma, lam)
        _check(r, v, m, gamma, lam, adv, ret)


def test_observation_holes_match_compressed_gae():
    """Requirement: on a batch of multi-turn rows (1-4 assistant turns separated by tool
    observations, different hole patterns per row, right padding), advantages and returns on
    mask-1 tokens equal GAE of each row with its mask-0 tokens deleted: the bootstrap of the last
    token of a turn is the value of the first token of the next assistant turn, discounted once.

    The official test uses one hand-written row and only checks that two value vectors that
    differ on masked positions give the same result, not that the result is GAE."""
    rng = np.random.default_rng(SEED + 1)
    r, v, m = make_multi_turn_batch(rng, bs=16, length=64)
    assert ((m[:, 1:] - m[:, :-1]) > 0).sum() >= 16  # real interior holes are present
    for gamma, lam in [(1.0, 0.95), (0.99, 0.9)]:
        adv, ret = _call(torch.from_numpy(r), torch.from_numpy(v), torch.from_numpy(m), gamma, lam)
        _check(r, v, m, gamma, lam, adv, ret)


def test_masked_positions_have_no_effect():
    """Requirement: values and rewards at mask-0 positions (observations, padding) do not
    influence advantages or returns at mask-1 positions: replacing them with large random
    numbers leaves those outputs unchanged (to float32 rounding, ATOL/RTOL) and every output stays finite.

    The official test perturbs values only (never rewards) on a single row."""
    rng = np.random.default_rng(SEED + 2)
    r, v, m = make_multi_turn_batch(rng, bs=12, length=48)
    sel = m > 0.5
    r2 = np.where(sel, r, rng.uniform(-500, 500, r.shape)).astype(np.float32)
    v2 = np.where(sel, v, rng.uniform(-500, 500, v.shape)).astype(np.float32)
    gamma, lam = 0.97, 0.9
    adv1, ret1 = _call(torch.from_numpy(r), torch.from_numpy(v), torch.from_numpy(m), gamma, lam)
    adv2, ret2 = _call(torch.from_numpy(r2), torch.from_numpy(v2), torch.from_numpy(m), gamma, lam)
    np.testing.assert_allclose(adv2[sel], adv1[sel], atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(ret2[sel], ret1[sel], atol=ATOL, rtol=RTOL)
    _check(r2, v2, m, gamma, lam, adv2, ret2)


def test_strided_inputs_int_mask_and_no_mutation():
    """Requirement: non-contiguous views (columns of a wider buffer, a transposed storage) and
    an int64 response mask give the same GAE as the reference, and the inputs are not modified.

    In the trainer these tensors are slices of a TensorDict batch and the mask is derived from
    the int64 attention mask; the official test passes fresh contiguous float tensors only."""
    rng = np.random.default_rng(SEED + 3)
    bs, L = 10, 50
    r, v, m = make_multi_turn_batch(rng, bs=bs, length=L)
    # The views are built in the subject: a tensor crosses the wire as a contiguous copy.
    r_buf = torch.zeros(bs, L + 30)
    r_buf[:, 30:] = torch.from_numpy(r)
    r_view = subject.keep(remote_operator.getitem, subject.put(r_buf), (slice(None), slice(30, None)))
    v_view = subject.keep(remote_torch.t, subject.put(torch.from_numpy(np.ascontiguousarray(v.T))))
    m_buf = torch.zeros(bs, 2 * L, dtype=torch.int64)
    m_buf[:, ::2] = torch.from_numpy(m).long()
    m_view = subject.keep(remote_operator.getitem, subject.put(m_buf), (slice(None), slice(None, None, 2)))
    for view in (r_view, v_view, m_view):
        assert view.is_contiguous() is False
        assert tuple(view.shape) == (bs, L)
    assert m_view.dtype == torch.int64
    before = (torch.from_numpy(r), torch.from_numpy(v), torch.from_numpy(m).long())
    gamma, lam = 0.99, 0.95
    adv, ret = _call(r_view, v_view, m_view, gamma, lam, shape=(bs, L))
    _check(r, v, m, gamma, lam, adv, ret)
    assert torch.equal(subject.fetch(r_view), before[0]) and torch.equal(subject.fetch(v_view), before[1])
    assert torch.equal(subject.fetch(m_view), before[2])


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (1.0, 0.0), (0.5, 1.0)])
def test_gamma_lam_edges(gamma, lam):
    """Requirement: at the edges of gamma and lambda the masked GAE is still the compressed
    GAE: lam = 1 (Monte-Carlo return minus V over generated tokens only), lam = 0 (one-step TD
    whose bootstrap is the next *generated* token's value) and gamma = 0.5 with lam = 1,
    including a row that starts with an observation hole (mask 0 at position 0).

    The official test draws gamma and lam uniformly from (0, 1) without a seed and never hits
    these values."""
    rng = np.random.default_rng(SEED + 4 + int(gamma * 10) + int(lam * 100))
    r, v, m = make_multi_turn_batch(rng, bs=8, length=40)
    m[0, :3] = 0  # leading hole: an observation before the first generated token
    m[0, 3:6] = 1
    adv, ret = _call(torch.from_numpy(r), torch.from_numpy(v), torch.from_numpy(m), gamma, lam)
    _check(r, v, m, gamma, lam, adv, ret)
