"""Structural probe: compute_gae_advantage_return keeps the interface the trainer calls."""
# INFRADEV-PROBE-CANARY-c1b52a57e24d

import torch
from infradev_probe import subject

PROBE_SECRET = "PROBE-SECRET-gae-interface-5d17"

core_algos = subject.module("verl.trainer.ppo.core_algos")
# Identity is decided in the subject (`operator.is_`), not by the judge's handle cache.
remote_operator = subject.module("operator")


def test_public_interface():
    """Requirement: `compute_gae_advantage_return(token_level_rewards, values, response_mask,
    gamma, lam)` stays in `verl.trainer.ppo.core_algos` with exactly these parameter names (the
    trainer calls it with keyword arguments), is still what `get_adv_estimator_fn("gae")`
    returns, and returns a pair of tensors of the input's shape when called with keywords.

    The official test calls the function positionally and never checks the registry entry or the
    parameter names, so a change of signature would go unnoticed there."""
    fn = core_algos.compute_gae_advantage_return
    assert subject.describe(fn)["callable"]
    assert list(subject.signature(fn).parameters) == [
        "token_level_rewards",
        "values",
        "response_mask",
        "gamma",
        "lam",
    ]
    assert remote_operator.is_(core_algos.get_adv_estimator_fn("gae"), fn) is True

    g = torch.Generator().manual_seed(3)
    r = torch.randn(3, 7, generator=g)
    v = torch.randn(3, 7, generator=g)
    m = torch.ones(3, 7)
    m[1, 5:] = 0
    out = fn(token_level_rewards=r, values=v, response_mask=m, gamma=0.99, lam=0.95)
    assert isinstance(out, tuple) and len(out) == 2
    adv, ret = out
    assert isinstance(adv, torch.Tensor) and isinstance(ret, torch.Tensor)
    assert adv.shape == (3, 7) and ret.shape == (3, 7)
    assert adv.dtype == torch.float32 and ret.dtype == torch.float32
