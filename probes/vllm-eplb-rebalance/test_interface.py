"""Structural probe: the public interface the task states (prompt.md, "Interface")."""
# INFRADEV-PROBE-CANARY-5e0b7c1f2a93

from infradev_probe import subject

default = subject.module("vllm.distributed.eplb.policy.default")
abstract = subject.module("vllm.distributed.eplb.policy.abstract")
rebalance_execute = subject.module("vllm.distributed.eplb.rebalance_execute")


def _params(fn):
    return subject.signature(fn).parameters


def test_public_interface():
    """Requirement: DefaultEplbPolicy.rebalance_experts and AbstractEplbPolicy.rebalance_experts
    take (weight, num_replicas, num_groups, num_nodes, num_ranks,
    old_global_expert_indices=None); DefaultEplbPolicy.preserve_intragpu_slots(phy2log,
    phy_replicas_idx, num_ranks, old_phy2log) exists; rearrange_expert_weights_inplace keeps
    (old_global_expert_indices, new_global_expert_indices, expert_weights, ep_group,
    is_profile=False, rank_mapping=None).

    The official test calls preserve_intragpu_slots positionally and never passes
    old_global_expert_indices to rebalance_experts, so a policy or a subclass contract that
    does not accept it passes."""
    for cls in (default.DefaultEplbPolicy, abstract.AbstractEplbPolicy):
        params = _params(cls.rebalance_experts)
        names = [n for n in params if n != "cls"]
        assert names[:6] == ["weight", "num_replicas", "num_groups", "num_nodes", "num_ranks",
                             "old_global_expert_indices"], names
        assert params["old_global_expert_indices"].default is None
    params = _params(default.DefaultEplbPolicy.preserve_intragpu_slots)
    names = [n for n in params if n != "cls"]
    assert names == ["phy2log", "phy_replicas_idx", "num_ranks", "old_phy2log"], names
    params = _params(rebalance_execute.rearrange_expert_weights_inplace)
    assert list(params)[:4] == ["old_global_expert_indices", "new_global_expert_indices",
                                "expert_weights", "ep_group"], list(params)
    assert params["is_profile"].default is False
    assert params["rank_mapping"].default is None
