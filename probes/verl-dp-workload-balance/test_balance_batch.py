"""Probes of the trainer's DP balancing, RayPPOTrainer._balance_batch: the batch is reordered so
that the equal chunks the dispatcher hands to the data-parallel ranks carry balanced FLOP
workloads, each rank's samples ordered lightest-at-both-ends, and the logged balance metrics
stay token counts."""
# INFRADEV-PROBE-CANARY-3a4a26899ba4

import random

import torch
from infradev_probe import subject, workload_seed

from _balance import lengths, oracle_max, padded_tensors, random_offsets, rank_order, workloads

PROBE_SECRET = "PROBE-SECRET-dpwb-balance-batch-f7fb"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

ray_trainer = subject.module("verl.trainer.ppo.ray_trainer")
protocol = subject.module("verl.protocol")
seqlen_balancing = subject.module("verl.utils.seqlen_balancing")
remote_types = subject.module("types")
remote_omegaconf = subject.module("omegaconf")


def _trainer(world, mini_batch=None):
    """What _balance_batch reads of the trainer (the prompt): actor_rollout_wg.world_size and,
    for keep_minibatch, config.actor_rollout_ref.actor.ppo_mini_batch_size."""
    wg = remote_types.SimpleNamespace(world_size=world)
    cfg = remote_omegaconf.OmegaConf.create({"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": mini_batch}}})
    return remote_types.SimpleNamespace(actor_rollout_wg=wg, config=cfg)


def _batch(rng, lens):
    """A DataProto as the trainer holds it after rollout (prompt left-padded, response
    right-padded: only the attention mask's row sums matter), plus a row marker."""
    width = max(lens) + rng.randint(0, 256)
    ids, mask = padded_tensors(subject, lens, width, random_offsets(rng, lens, width))
    rows = subject.put(torch.arange(len(lens), dtype=torch.int64))
    return protocol.DataProto.from_dict(tensors={"input_ids": ids, "attention_mask": mask, "probe_row": rows})


def _order(batch, n):
    order = batch.batch["probe_row"]
    assert isinstance(order, torch.Tensor)
    order = order.tolist()
    assert sorted(order) == list(range(n)), "the batch is not a permutation of the original rows"
    return order


# Workload: 6 long-tailed batches (~30% of 16k-48k tokens, the rest 128-4k) of 32-64 samples
# over 2, 4 and 8 ranks. On this family, balancing token counts with the same equal-size
# partitioner leaves the heaviest rank heavier than balancing workloads in 80% (2 ranks), 97%
# (4) and 76% (8) of the batches (400 batches each): a token-balanced submission passes all 6
# with probability < 1e-4.
CASES = [(2, 32), (4, 64), (8, 64), (4, 64), (2, 32), (8, 64)]


def test_dp_ranks_balanced_by_workload():
    """Requirement: after `RayPPOTrainer._balance_batch(trainer, batch, metrics)` the batch is a
    permutation whose world_size equal consecutive chunks (one per DP rank) have a heaviest
    chunk (in 24576*s + s^2 workload of the attention mask's row sums) no heavier than the
    existing `get_seqlen_balanced_partitions(workloads, world_size, equal_size=True)` makes, and
    each chunk is ordered a1, a3, a5, ..., a4, a2 of its workloads sorted ascending; with
    keep_minibatch=True (ppo_mini_batch_size 16, 4 ranks) every rank gets exactly 4 samples of
    each mini-batch of 16 consecutive rows, and each mini-batch is spread over the ranks at
    least as evenly as that partitioner spreads it.

    The PR added no test: no official test calls _balance_batch."""
    rng = random.Random(SEED)
    partitioner = seqlen_balancing.get_seqlen_balanced_partitions
    balance = ray_trainer.RayPPOTrainer._balance_batch
    for c, (world, n) in enumerate(CASES):
        lens = lengths(rng, n)
        ws = workloads(lens)
        batch = _batch(rng, lens)
        balance(_trainer(world), batch, subject.put({}))
        order = _order(batch, n)
        m = n // world
        chunks = [order[r * m:(r + 1) * m] for r in range(world)]
        sums = [sum(ws[i] for i in ch) for ch in chunks]
        bar = oracle_max(partitioner, ws, world, equal_size=True)
        assert max(sums) <= bar, (
            f"case {c} ({world} ranks, {n} samples): heaviest rank {max(sums)} > {bar}, what "
            f"balancing the FLOP workloads gives: not balanced by workload")
        for r, ch in enumerate(chunks):
            got = [ws[i] for i in ch]
            assert got == rank_order(got), (
                f"case {c}, rank {r}: samples not ordered lightest-first, second lightest last")

    world, n, mini = 4, 64, 16
    lens = lengths(rng, n)
    ws = workloads(lens)
    batch = _batch(rng, lens)
    balance(_trainer(world, mini), batch, subject.put({}), keep_minibatch=True)
    order = _order(batch, n)
    m = n // world
    chunks = [order[r * m:(r + 1) * m] for r in range(world)]
    for i in range(n // mini):
        members = [[j for j in ch if i * mini <= j < (i + 1) * mini] for ch in chunks]
        assert [len(x) for x in members] == [mini // world] * world, (
            f"keep_minibatch: mini-batch {i} is not split {mini // world} per rank")
        sub = ws[i * mini:(i + 1) * mini]
        bar = oracle_max(partitioner, sub, world, equal_size=True)
        heaviest = max(sum(ws[j] for j in x) for x in members)
        assert heaviest <= bar, f"keep_minibatch: mini-batch {i} not balanced by workload over the ranks"


def test_balance_metrics_stay_token_counts():
    """Requirement: the metrics `_balance_batch(..., logging_prefix="probe_seqlen")` adds (2 and
    4 ranks, 16 samples each) are
    token counts, as before the change: probe_seqlen/min, /max and /minmax_diff of the ranks'
    token totals in the original order, /balanced_min and /balanced_max of the ranks' token
    totals after balancing, /mean = all tokens / world_size; entries already in `metrics` stay.

    Regression guard (upstream fixed this in PR #4129): the merged change logged these figures
    in FLOP workloads. No official test calls _balance_batch."""
    for world in (2, 4):
        _check_metrics(random.Random(SEED + world), world)


def _check_metrics(rng, world):
    n = 16 * world
    lens = lengths(rng, n)
    batch = _batch(rng, lens)
    metrics = subject.put({"other/kept": 1.5})
    ray_trainer.RayPPOTrainer._balance_batch(_trainer(world), batch, metrics, logging_prefix="probe_seqlen")
    order = _order(batch, n)
    got = subject.fetch(metrics)
    assert isinstance(got, dict)
    m = n // world
    before = [sum(lens[r * m:(r + 1) * m]) for r in range(world)]
    after = [sum(lens[i] for i in order[r * m:(r + 1) * m]) for r in range(world)]
    want = {
        "probe_seqlen/min": min(before),
        "probe_seqlen/max": max(before),
        "probe_seqlen/minmax_diff": max(before) - min(before),
        "probe_seqlen/balanced_min": min(after),
        "probe_seqlen/balanced_max": max(after),
        "probe_seqlen/mean": sum(lens) / world,
    }
    assert got.get("other/kept") == 1.5, "an existing metric was dropped"
    for key, value in want.items():
        assert key in got, f"metric {key} missing"
        v = got[key]
        if isinstance(v, torch.Tensor):
            assert v.numel() == 1, f"{key} is not a scalar"
        if not isinstance(v, (int, float)) and hasattr(v, "item"):  # a tensor or numpy scalar
            v = v.item()
        assert isinstance(v, (int, float)), f"{key} is not a number"
        assert abs(float(v) - value) <= 1e-9 * max(1.0, abs(value)), (
            f"{key} = {v}, expected {value} (tokens): not a token count")
