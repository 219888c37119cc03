"""Memory probe: the vectorised RLOO estimator needs extra memory linear in the batch: no
(bs x bs) group-membership matrix, no (bs x groups) one-hot matrix."""
# INFRADEV-PROBE-CANARY-3c9e51d0a7b4

import uuid

import numpy as np
import torch
from infradev_probe import subject, subject_op, workload_seed

PROBE_SECRET = "PROBE-SECRET-rloo-memory-71fc"
SEED = workload_seed(PROBE_SECRET)

core_algos = subject.module("verl.trainer.ppo.core_algos")
remote_torch = subject.module("torch")
remote_operator = subject.module("operator")

# The broker measures the subject's peak memory above its level at the test's start: importing
# verl, or the first call's lazily loaded kernels and allocator arenas, must not land in it.
# So verl is imported, and the estimator called once on a tiny batch, at collection.


def _warm_up():
    try:
        subject.describe(core_algos.AdvantageEstimator)
        subject.describe(remote_torch.ones)
        subject.describe(remote_operator.getitem)
        subject.keep(
            core_algos.compute_rloo_vectorized_outcome_advantage,
            token_level_rewards=torch.ones(6, 4),
            response_mask=torch.ones(6, 4),
            index=np.array(["a", "a", "b", "c", "c", "c"], dtype=object),
        )
    except Exception:
        pass  # the test meets the error again and reports it


_warm_up()

# Workload: bs = 8192 responses of 16 tokens in ~3300 groups (1-4 rollouts per prompt: mostly
# pairs, as RLOO with n=2 is run), uuid-string uids in a numpy object array. The inputs are
# made in the subject inside the test (rewards and mask: 0.5 MiB each; the uid array ~1 MiB):
# they are part of the measured peak. Calibration: see probes.toml.
BS, T = 8192, 16


def test_extra_memory_is_linear_in_batch():
    """Requirement: one call of `compute_rloo_vectorized_outcome_advantage` at bs=8192 with
    ~3300 groups (uuid-string uids) stays within the test's peak-memory budget: group counts and
    sums come from per-group reductions (O(bs + groups) memory), not from a (bs x bs)
    membership matrix or a (bs x groups) one-hot matrix.

    The official test runs at bs <= 512 and 10 groups, where even a bs x bs matrix is 1 MiB."""
    rng = np.random.default_rng(SEED)
    sizes = rng.choice([1, 2, 2, 2, 3, 4], size=BS)
    sizes = sizes[: int(np.searchsorted(np.cumsum(sizes), BS)) + 1]
    gid = np.repeat(np.arange(len(sizes)), sizes)[:BS]
    rng.shuffle(gid)
    names = [str(uuid.UUID(int=int(rng.integers(0, 2**62)) * 8192 + g, version=4)) for g in range(len(sizes))]
    index = np.array([names[g] for g in gid], dtype=object)

    rewards = subject.keep(remote_torch.randn, BS, T)
    mask = subject.keep(remote_torch.ones, BS, T)
    out = subject.keep(core_algos.compute_rloo_vectorized_outcome_advantage,
                       token_level_rewards=rewards, response_mask=mask, index=index)
    # len() of a handle is not forwarded (the judge decides on data only): asked explicitly
    assert subject_op(out, "__len__") == 2
    adv = subject.keep(remote_operator.getitem, out, 0)  # stays in the subject (no encoding)
    assert list(adv.shape) == [BS, T]
