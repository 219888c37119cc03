"""Traffic across pipeline stages with tensor parallelism: each stage-0 TP rank sends only its
1/TP slice of a tensor split across TP, and the stage-1 TP ranks rebuild it with one
all-gather. The broker measures each rank's bytes sent from outside the subject."""
# INFRADEV-PROBE-CANARY-7c2e91d4b0a6

import torch
from infradev_probe import subject, workload_seed

import _pp as P

PROBE_SECRET = "PROBE-SECRET-pp-traffic-51c0"
SEED = workload_seed(PROBE_SECRET)

# 4 exchanges of two fp32 [64, 1024] tensors (256 KiB each) from stage 0 (ranks 0, 1) to
# stage 1 (ranks 2, 3), TP size 2: each sender must send 4 x 2 x 128 KiB = 1 MiB of slices,
# each receiver all-gathers the same 1 MiB to its TP peer. Sending whole tensors from every
# TP rank doubles a sender's bytes; all-gathering twice doubles a receiver's (see the
# calibration note in probes.toml).
STEPS, TOKENS, HIDDEN = 4, 64, 1024


def test_pp_tp_sends_each_slice_once():
    """Requirement: with pipeline size 2 and TP size 2 on 4 gloo ranks, 4 isend_tensor_dict /
    irecv_tensor_dict exchanges of two fp32 [64, 1024] tensors (all_gather_group = the TP
    group) deliver the full tensors to both stage-1 ranks, bit for bit, while no rank sends
    more than the traffic budget: each sender's 1/TP slices once (1 MiB in all), each
    receiver one all-gather of its slice per tensor.

    The official tests monkeypatch torch.distributed and never measure what is sent: sending
    the whole tensor from every TP rank, or sending and all-gathering twice, passes them."""
    gen = torch.Generator().manual_seed(SEED)
    with subject.ranks(4) as group:
        pps, tps = P.init_parallel(group, tp=2, pp=2)
        st = P.Stages(group, pps, tps)
        for k in range(STEPS):
            d = {"hidden_states": torch.randn(TOKENS, HIDDEN, generator=gen),
                 "residual": torch.randn(TOKENS, HIDDEN, generator=gen)}
            res = st.post({0: (d, None), 1: (d, None)}, {2: None, 3: None})
            dicts = st.complete(res, n_handles=2)
            for r in (2, 3):
                P.check_dict(group[r].fetch(dicts[r]), d, f"exchange {k}: rank {r}")
        st.wait_sends()
