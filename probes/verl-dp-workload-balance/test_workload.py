"""Numerical probe: calculate_workload is the prompt's FLOP proxy, element-wise, on the tensors
the trainer and the workers pass it (int64 lengths from attention_mask.sum or nested offsets)."""
# INFRADEV-PROBE-CANARY-3a4a26899ba4

import random

import torch
from infradev_probe import subject, workload_seed

from _balance import workload

PROBE_SECRET = "PROBE-SECRET-dpwb-workload-9401"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

seqlen_balancing = subject.module("verl.utils.seqlen_balancing")
remote_operator = subject.module("operator")

# Tolerance: only proportionality is required (a constant factor does not change any
# partition). With int64 results the check is exact; a float result is allowed 1e-6 relative
# (float32 keeps ~6e-8). The smallest wrong constant worth catching, 24577 instead of 24576,
# moves the ratio between s = 1 and s = 131072 by 4e-5.
RTOL = 1e-6


def _check(lens, out, what):
    assert isinstance(out, torch.Tensor), f"{what}: returns a tensor"
    assert tuple(out.shape) == (len(lens),), f"{what}: shape {tuple(out.shape)} for {len(lens)} lengths"
    got = out.tolist()
    want = [workload(s) for s in lens]
    # the scale: from the largest expected value (never 0 here)
    j = max(range(len(lens)), key=lambda i: want[i])
    scale = got[j] / want[j]
    assert scale > 0, f"{what}: workloads must be positive multiples of 24576*s + s^2"
    for s, g, w in zip(lens, got, want):
        assert abs(g - scale * w) <= RTOL * scale * max(w, 1), (
            f"{what}: calculate_workload({s}) is not proportional to 24576*s + s^2")


def test_flop_proxy_elementwise():
    """Requirement: `calculate_workload(seqlen_list)` maps a 1-D int64 tensor of sequence
    lengths to a tensor of the same shape whose values are proportional to 24576*s + s^2 (the
    FLOPs of a dense block of hidden size 4096, 12h^2 s + 2h s^2), for lengths 0 to 10^6,
    including strided views, without modifying its input; an empty tensor gives an empty tensor.

    No official test calls calculate_workload."""
    rng = random.Random(SEED)
    fixed = [0, 1, 2, 7, 4096, 24576, 32768, 131072, 1_000_000]
    drawn = [rng.randint(1, 65536) for _ in range(40)]
    lens = fixed + drawn
    src = torch.tensor(lens, dtype=torch.int64)
    h = subject.put(src)
    _check(lens, seqlen_balancing.calculate_workload(h), "contiguous int64")
    assert subject.fetch(h).tolist() == lens, "calculate_workload modified its input"

    # A strided view living in the subject (a copy would cross as a contiguous tensor).
    wide = subject.put(torch.tensor([[s, -1] for s in lens], dtype=torch.int64))
    column = subject.keep(remote_operator.getitem, wide, (slice(None), 0))
    _check(lens, seqlen_balancing.calculate_workload(column), "strided int64 view")

    empty = seqlen_balancing.calculate_workload(torch.zeros(0, dtype=torch.int64))
    assert isinstance(empty, torch.Tensor) and empty.numel() == 0, "empty lengths give an empty tensor"
