"""Structural probe: the names and signature promised by the task prompt exist and are wired
into the advantage-estimator registry."""
# INFRADEV-PROBE-CANARY-3c9e51d0a7b4

from infradev_probe import subject

PROBE_SECRET = "PROBE-SECRET-rloo-interface-8d42"

core_algos = subject.module("verl.trainer.ppo.core_algos")
# Identity is decided in the subject (`operator.is_`), not by the judge's handle cache.
remote_operator = subject.module("operator")


def _same(a, b):
    return remote_operator.is_(a, b) is True


def test_public_interface():
    """Requirement: `compute_rloo_vectorized_outcome_advantage(token_level_rewards,
    response_mask, index, epsilon=1e-6, config=None, **kwargs)` exists in
    `verl.trainer.ppo.core_algos`, `AdvantageEstimator.RLOO_VECTORIZED` has the value
    "rloo_vectorized", `get_adv_estimator_fn("rloo_vectorized")` (by string and by enum member)
    returns the new function, and the loop estimator is still registered as "rloo".

    The official test imports the function directly; it never resolves it through the registry,
    which is how the trainer reaches every estimator other than gae/grpo."""
    fn = core_algos.compute_rloo_vectorized_outcome_advantage
    assert subject.describe(fn)["callable"]
    params = subject.signature(fn).parameters
    assert list(params)[:3] == ["token_level_rewards", "response_mask", "index"]
    assert params["epsilon"].default == 1e-6
    assert params["config"].default is None
    assert any(p.kind == p.VAR_KEYWORD for p in params.values()), "**kwargs: the trainer may pass more"

    assert core_algos.AdvantageEstimator.RLOO_VECTORIZED.value == "rloo_vectorized"
    assert _same(core_algos.get_adv_estimator_fn("rloo_vectorized"), fn)
    assert _same(core_algos.get_adv_estimator_fn(core_algos.AdvantageEstimator.RLOO_VECTORIZED), fn)
    assert _same(core_algos.get_adv_estimator_fn("rloo"), core_algos.compute_rloo_outcome_advantage)
    assert not _same(core_algos.compute_rloo_outcome_advantage, fn)
