"""Structural probe: the interfaces the task prompt promises, with their parameter names and
defaults (the trainer and the workers call them by keyword)."""
# INFRADEV-PROBE-CANARY-3a4a26899ba4

from infradev_probe import subject

PROBE_SECRET = "PROBE-SECRET-dpwb-interface-b93c"

seqlen_balancing = subject.module("verl.utils.seqlen_balancing")
ray_trainer = subject.module("verl.trainer.ppo.ray_trainer")

EMPTY = object()


def _params(fn):
    sig = subject.signature(fn)
    return [(name, p.default if p.default is not p.empty else EMPTY) for name, p in sig.parameters.items()]


def test_public_interface():
    """Requirement: `verl.utils.seqlen_balancing.calculate_workload(seqlen_list)` exists;
    `rearrange_micro_batches(batch, max_token_len, dp_group=None, num_batches_divided_by=None,
    same_micro_num_in_dp=True, min_num_micro_batch=None, use_dynamic_bsz_balance=True)` keeps its
    signature; `RayPPOTrainer._balance_batch(self, batch, metrics, logging_prefix="global_seqlen",
    keep_minibatch=False)` gains `keep_minibatch`.

    No official test names calculate_workload or _balance_batch (the PR added no test)."""
    calc = _params(seqlen_balancing.calculate_workload)
    assert [name for name, _ in calc][:1] == ["seqlen_list"], calc
    assert all(default is not EMPTY for _, default in calc[1:]), "calculate_workload takes one required argument"

    assert _params(seqlen_balancing.rearrange_micro_batches) == [
        ("batch", EMPTY), ("max_token_len", EMPTY), ("dp_group", None), ("num_batches_divided_by", None),
        ("same_micro_num_in_dp", True), ("min_num_micro_batch", None), ("use_dynamic_bsz_balance", True),
    ]
    balance = _params(ray_trainer.RayPPOTrainer._balance_batch)
    assert balance[:5] == [
        ("self", EMPTY), ("batch", EMPTY), ("metrics", EMPTY), ("logging_prefix", "global_seqlen"),
        ("keep_minibatch", False),
    ], balance
    assert all(default is not EMPTY for _, default in balance[5:]), "extra parameters need defaults"
