"""Structural probe: the names and signatures promised by the task prompt exist and are wired
into the advantage-estimator registry."""
# INFRADEV-PROBE-CANARY-90e2a2fce621

from infradev_probe import subject

PROBE_SECRET = "PROBE-SECRET-grpo-interface-3b81"

core_algos = subject.module("verl.trainer.ppo.core_algos")
verl_utils = subject.module("verl.utils")
# Identity is decided in the subject (`operator.is_`), not by the judge's handle cache.
remote_operator = subject.module("operator")


def _same(a, b):
    return remote_operator.is_(a, b) is True


def test_public_interface():
    """Requirement: `compute_grpo_vectorized_outcome_advantage(token_level_rewards,
    response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True, config=None)` exists in
    `verl.trainer.ppo.core_algos`, `AdvantageEstimator.GRPO_VECTORIZED` has the value
    "grpo_vectorized", `get_adv_estimator_fn("grpo_vectorized")` returns the new function, the
    loop estimator is still registered as "grpo", and `verl.utils` exports
    `as_torch_index(index, device=None)` and `group_mean_std(scores, gidx, eps=1e-6, device=None)`.

    The official tests import the function directly and call it with three keyword arguments;
    they never look it up through the registry (the path the trainer uses for every estimator
    other than gae/grpo) nor check the defaults of epsilon / norm_adv_by_std_in_grpo."""
    fn = core_algos.compute_grpo_vectorized_outcome_advantage
    assert subject.describe(fn)["callable"]
    params = subject.signature(fn).parameters
    assert list(params)[:3] == ["token_level_rewards", "response_mask", "index"]
    assert params["epsilon"].default == 1e-6
    assert params["norm_adv_by_std_in_grpo"].default is True
    assert params["config"].default is None

    assert core_algos.AdvantageEstimator.GRPO_VECTORIZED.value == "grpo_vectorized"
    assert _same(core_algos.get_adv_estimator_fn("grpo_vectorized"), fn)
    assert _same(core_algos.get_adv_estimator_fn(core_algos.AdvantageEstimator.GRPO_VECTORIZED), fn)
    assert _same(core_algos.get_adv_estimator_fn("grpo"), core_algos.compute_grpo_outcome_advantage)
    assert not _same(core_algos.compute_grpo_outcome_advantage, fn)

    p = subject.signature(verl_utils.as_torch_index).parameters
    assert list(p)[:2] == ["index", "device"] and p["device"].default is None
    p = subject.signature(verl_utils.group_mean_std).parameters
    assert list(p)[:4] == ["scores", "gidx", "eps", "device"]
    assert p["eps"].default == 1e-6 and p["device"].default is None
