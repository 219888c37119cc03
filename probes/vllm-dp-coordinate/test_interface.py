"""Interface and single-process probes (the plain subject, no rank group)."""
# INFRADEV-PROBE-CANARY-3c7a91e04b6d

import random

import numpy as np
import pytest
from infradev_probe import subject, workload_seed

import _dp as D

SEED = workload_seed("PROBE-SECRET-dp-coordinate-iface-07b2")

DPU = "vllm.v1.worker.dp_utils"
UBU = "vllm.v1.worker.ubatch_utils"
FC = "vllm.forward_context"


def test_public_interface():
    """Requirement: vllm.v1.worker.dp_utils.coordinate_batch_across_dp(
    num_scheduled_tokens_per_request, num_tokens_unpadded, num_tokens_padded,
    parallel_config, allow_microbatching, uniform_decode) exists; ParallelConfig has
    disable_nccl_for_dp_synchronization (default False); with data_parallel_size 1 the call
    returns (None, None) without a DP group; create_ubatch_slices and
    check_ubatch_thresholds live in vllm.v1.worker.ubatch_utils.

    The official test only imports create_ubatch_slices from its new module."""
    dpu = subject.module(DPU)
    ubu = subject.module(UBU)
    cfgmod = subject.module("vllm.config")
    params = list(subject.signature(dpu.coordinate_batch_across_dp).parameters)
    assert params == ["num_scheduled_tokens_per_request", "num_tokens_unpadded",
                      "num_tokens_padded", "parallel_config", "allow_microbatching",
                      "uniform_decode"]
    assert list(subject.signature(ubu.create_ubatch_slices).parameters) == \
        ["num_scheduled_tokens", "split_point"]
    assert list(subject.signature(ubu.check_ubatch_thresholds).parameters) == \
        ["config", "num_tokens", "uniform_decode"]
    cfg = cfgmod.ParallelConfig()
    assert cfg.disable_nccl_for_dp_synchronization is False
    cfg1 = cfgmod.ParallelConfig(data_parallel_size=1, enable_dbo=True,
                                 disable_nccl_for_dp_synchronization=True)
    out = dpu.coordinate_batch_across_dp(np.array([30, 40], dtype=np.int32), 70, 72, cfg1,
                                         True, False)
    assert out == (None, None)


def test_create_ubatch_slices_matches_model():
    """Requirement: ubatch_utils.create_ubatch_slices(num_scheduled_tokens, split_point)
    returns two UBatchSlices: tokens [0, split) and [split, total); requests [0, first
    request ending at or after split] and [request holding token split, end) (a straddling
    request in both), on 200 random batches and split points.

    The official test exercises it only through one parametrized prefill split."""
    ubu = subject.module(UBU)
    f = ubu.create_ubatch_slices
    rng = random.Random(SEED)
    for _ in range(200):
        ns = [rng.choice([1, 1, 2, 5, rng.randint(1, 60)]) for _ in range(rng.randint(1, 12))]
        split = rng.randint(1, sum(ns) - 1) if sum(ns) > 1 else 1
        got = f(np.array(ns, dtype=np.int32), split)
        pairs = [((int(s.request_slice.start), int(s.request_slice.stop)),
                  (int(s.token_slice.start), int(s.token_slice.stop))) for s in got]
        assert pairs == D.ubatch_slices(ns, split), (ns, split)


def test_dp_metadata_takes_the_given_counts():
    """Requirement: DPMetadata.make(parallel_config, num_tokens, num_tokens_across_dp_cpu)
    communicates nothing (no DP group exists here): it keeps the counts it is given and their
    maximum, and refuses (AssertionError) counts whose entry at data_parallel_rank is not
    num_tokens. set_forward_context(attn_metadata, vllm_config, num_tokens=...,
    num_tokens_across_dp=...) with data_parallel_size 4 builds that DPMetadata from its
    num_tokens, or from 0 when it is given attention metadata and no num_tokens.

    The official test never builds a DPMetadata: a make that ignores the rank's own count, or
    a forward context that passes it another count, passes it."""
    fc = subject.module(FC)
    cfgmod = subject.module("vllm.config")
    torch_s = subject.module("torch")
    rng = random.Random(SEED + 17)
    for _ in range(12):
        rank = rng.randrange(4)
        counts = [rng.randint(1, 4096) for _ in range(4)]
        cfg = cfgmod.ParallelConfig(data_parallel_size=4, data_parallel_rank=rank)
        across = subject.keep(torch_s.tensor, counts, dtype=torch_s.int32)
        md = fc.DPMetadata.make(cfg, counts[rank], across)
        assert [int(x) for x in md.num_tokens_across_dp_cpu.tolist()] == counts
        assert int(md.max_tokens_across_dp_cpu) == max(counts)
        with pytest.raises(AssertionError):
            fc.DPMetadata.make(cfg, counts[rank] + rng.randint(1, 64), across)

    rank = rng.randrange(4)
    counts = [rng.randint(1, 512) for _ in range(4)]
    # device_config: vLLM infers no device type on a CPU-only host without its compiled ops.
    vcfg = cfgmod.VllmConfig(
        device_config=cfgmod.DeviceConfig(device="cpu"),
        parallel_config=cfgmod.ParallelConfig(data_parallel_size=4, data_parallel_rank=rank))
    across = subject.keep(torch_s.tensor, counts, dtype=torch_s.int32)
    with pytest.raises(AssertionError):
        with fc.set_forward_context(None, vcfg, num_tokens=counts[rank] + 1,
                                    num_tokens_across_dp=across):
            pass
    with fc.set_forward_context(None, vcfg, num_tokens=counts[rank], num_tokens_across_dp=across):
        md = fc.get_forward_context().dp_metadata
        assert [int(x) for x in md.num_tokens_across_dp_cpu.tolist()] == counts
        assert int(md.max_tokens_across_dp_cpu) == max(counts)
    counts[rank] = 0
    across = subject.keep(torch_s.tensor, counts, dtype=torch_s.int32)
    with fc.set_forward_context(subject.keep(subject.module("builtins").object), vcfg,
                                num_tokens_across_dp=across):
        md = fc.get_forward_context().dp_metadata
        assert [int(x) for x in md.num_tokens_across_dp_cpu.tolist()] == counts
