"""Probes across pipeline stages: isend_tensor_dict / irecv_tensor_dict (and their blocking
forms) between the stages of real gloo groups made by vLLM's own parallel state, as the GPU
worker uses them: the last stage's TP ranks must each end with the full dictionary the
previous stage's TP ranks hold. The expected dictionary is the sender's own (a single-rank
reference, compared bit for bit: nothing is computed, only copied)."""
# INFRADEV-PROBE-CANARY-7c2e91d4b0a6

import torch
from infradev_probe import subject, workload_seed

import _pp as P

PROBE_SECRET = "PROBE-SECRET-pp-exchange-3f8a"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

GW = "vllm.v1.worker.gpu_worker"


def _gen(k):
    return torch.Generator().manual_seed(SEED * 100 + k)


def test_pp2_tp2_async_exchange():
    """Requirement: on 4 gloo ranks with pipeline size 2 and tensor-parallel size 2 (stage 0 =
    ranks 0, 1; stage 1 = ranks 2, 3), both stage-0 TP ranks isend_tensor_dict the same
    dictionary with all_gather_group = their TP group while both stage-1 TP ranks
    irecv_tensor_dict from them; after waiting the handles and running the postprocess
    functions, each stage-1 rank's dictionary equals the sender's bit for bit: fp32 and
    bf16 tensors split across TP (sliced and all-gathered), an int64 tensor whose size does not
    divide by the TP size (sent whole), an empty fp16 tensor (never transferred: one handle
    per non-empty tensor), non-tensor entries, all_gather_tensors={"residual": False} (each stage-0
    TP rank holding its own residual, as with sequence parallelism: TP rank i of stage 1 gets
    TP rank i's, whole), explicit dst/src (ranks within the PP group), varying token counts over 6
    exchanges, a dictionary of only an empty tensor and non-tensors (no handles at all), the
    blocking send_tensor_dict / recv_tensor_dict interoperating with the async forms, and an
    AsyncIntermediateTensors built from the irecv results whose first .tensors read completes
    the exchange (the TP all-gather on both receivers at once).

    The official tests call irecv_tensor_dict on one process with torch.distributed.irecv
    monkeypatched and a fake all-gather group, and never call isend_tensor_dict: they check
    neither what travels between real ranks nor that the sender's slices and the receiver's
    all-gather reassemble the tensor."""
    with subject.ranks(4) as group:
        pps, tps = P.init_parallel(group, tp=2, pp=2)
        assert [pps[r].ranks for r in range(4)] == [[0, 2], [1, 3], [0, 2], [1, 3]]
        st = P.Stages(group, pps, tps)
        senders, receivers = (0, 1), (2, 3)

        def exchange(d, what, dst=None, src=None, agt=None, n_handles=None, **kw):
            res = st.post({r: (d, dst) for r in senders}, {r: src for r in receivers},
                          agt=agt, **kw)
            if kw.get("sync_recv"):
                for r in receivers:
                    P.check_dict(group[r].fetch(res[r]), d, f"{what}: rank {r}")
                return
            dicts = st.complete(res, n_handles)
            for r in receivers:
                P.check_dict(group[r].fetch(dicts[r]), d, f"{what}: rank {r}")

        for k, tokens in enumerate((8, 5, 1)):
            d = P.make_dict(_gen(k), tokens, 96)
            exchange(d, f"exchange {k} ({tokens} tokens)", n_handles=3)
        # all_gather_tensors={"residual": False}: as with a sequence-parallel residual, each
        # stage-0 TP rank holds its own residual; TP rank i of stage 1 gets TP rank i's, whole.
        d = P.make_dict(_gen(10), 6, 64)
        own = {r: dict(d, residual=torch.randn(6, 64, generator=_gen(30 + r)).to(torch.bfloat16))
               for r in senders}
        res = st.post({r: (own[r], None) for r in senders}, {r: None for r in receivers},
                      agt={"residual": False})
        dicts = st.complete(res, 3)
        for i, r in enumerate(receivers):
            P.check_dict(group[r].fetch(dicts[r]), own[senders[i]],
                         f"all_gather_tensors={{'residual': False}}: rank {r}")
        d = P.make_dict(_gen(11), 4, 32, odd=False)
        exchange(d, "explicit dst=1 / src=0", dst=1, src=0, n_handles=2)
        only_empty = {"aux_empty": torch.empty(0, 16), "step_tag": "empty", "n": 0}
        exchange(only_empty, "only an empty tensor", n_handles=0)
        d = P.make_dict(_gen(12), 7, 48)
        exchange(d, "send_tensor_dict -> irecv_tensor_dict", sync_send=True, n_handles=3)
        d = P.make_dict(_gen(13), 3, 40)
        exchange(d, "isend_tensor_dict -> recv_tensor_dict", sync_recv=True)

        # The worker's way: the irecv results wrapped in an AsyncIntermediateTensors, the
        # exchange completed by the first read of .tensors (on both TP ranks at once).
        group.call_each([P.noop(group[0]), P.noop(group[1]),
                         group[2].module("importlib").import_module,
                         group[3].module("importlib").import_module],
                        [(), (), (GW,), (GW,)])
        d = P.make_dict(_gen(14), 9, 96)
        res = st.post({r: (d, None) for r in senders}, {r: None for r in receivers})
        wrapped = {}
        for r in receivers:
            rank = group[r]
            td = P.item_kept(rank, res[r], 0)
            hs = P.item_kept(rank, res[r], 1)
            post = P.item_kept(rank, res[r], 2)
            wrapped[r] = rank.module(GW).AsyncIntermediateTensors(
                td, comm_handles=hs, comm_postprocess=post)
        getters = [P.noop(group[0]), P.noop(group[1])] + [
            group[r].module("operator").attrgetter("tensors") for r in receivers]
        out = group.call_each(getters, [(), (), (wrapped[2],), (wrapped[3],)])
        for r in receivers:
            P.check_dict(out[r], d, f"AsyncIntermediateTensors.tensors: rank {r}")
            again = wrapped[r].tensors  # no second wait or all-gather
            P.check_dict(again, d, f"AsyncIntermediateTensors.tensors read again: rank {r}")
        st.wait_sends()


def test_pp4_stage_chain():
    """Requirement: on 4 gloo ranks with pipeline size 4 (TP size 1, all_gather_group = the
    TP group of one rank, as the worker passes it), isend_tensor_dict / irecv_tensor_dict with
    the default peers (dst = next rank of the PP group, src = the previous one, wrapping from
    the last stage to the first) and with explicit ones: two stage pairs exchanging at once,
    a dictionary received by stage 1 forwarded unchanged to stage 2 (and on to stage 3),
    stage 0 sending straight to stage 3 (dst=3 / src=0) while stage 1 sends to stage 2, the last
    stage sending to the first, and a dictionary with nothing to transfer; every receiver ends
    with the sender's dictionary bit for bit.

    The official tests never run isend_tensor_dict or irecv_tensor_dict between processes, nor
    with more than two pipeline stages or explicit peers."""
    with subject.ranks(4) as group:
        pps, tps = P.init_parallel(group, tp=1, pp=4)
        assert [pps[r].rank_in_group for r in range(4)] == [0, 1, 2, 3]
        # a group of one rank (here each rank's TP group) has no peer: nothing is sent
        one = P.make_dict(_gen(19), 2, 4)
        for r in (0, 3):
            assert tps[r].world_size == 1
            assert list(tps[r].isend_tensor_dict(one)) == [], "a 1-rank group sends nothing"
            assert tuple(tps[r].irecv_tensor_dict()) == (None, [], []), (
                "irecv_tensor_dict on a 1-rank group returns (None, [], [])")
        st = P.Stages(group, pps, tps)

        d0 = P.make_dict(_gen(20), 5, 24)
        d2 = P.make_dict(_gen(21), 3, 16)
        res = st.post({0: (d0, None), 2: (d2, None)}, {1: None, 3: None})
        got = st.complete(res, n_handles=3)
        P.check_dict(group[1].fetch(got[1]), d0, "stage 0 -> 1")
        P.check_dict(group[3].fetch(got[3]), d2, "stage 2 -> 3")

        # stage 1 forwards the dictionary it received (its own subject-side object)
        res = st.post({1: (got[1], None)}, {2: None})
        got2 = st.complete(res, n_handles=3)
        P.check_dict(group[2].fetch(got2[2]), d0, "stage 1 -> 2 (forwarded)")
        res = st.post({2: (got2[2], 3)}, {3: 2})
        got3 = st.complete(res, n_handles=3)
        P.check_dict(group[3].fetch(got3[3]), d0, "stage 2 -> 3 (forwarded, explicit peers)")

        d5 = P.make_dict(_gen(22), 2, 8, empty=False)
        d6 = P.make_dict(_gen(23), 6, 8)
        res = st.post({0: (d5, 3), 1: (d6, None)}, {3: 0, 2: None})
        got = st.complete(res)
        P.check_dict(group[3].fetch(got[3]), d5, "stage 0 -> 3 (dst=3, src=0)")
        P.check_dict(group[2].fetch(got[2]), d6, "stage 1 -> 2 (defaults) at the same time")

        d7 = P.make_dict(_gen(24), 4, 12)
        res = st.post({3: (d7, None)}, {0: None})
        got = st.complete(res, n_handles=3)
        P.check_dict(group[0].fetch(got[0]), d7, "stage 3 -> 0 (default peers wrap)")

        d8 = {"nothing": torch.empty(0, dtype=torch.int32), "k": "v"}
        res = st.post({1: (d8, None)}, {2: None})
        got = st.complete(res, n_handles=0)
        P.check_dict(group[2].fetch(got[2]), d8, "nothing to transfer")
        assert st.pending[1] == [], "isend_tensor_dict of only empty tensors returns no handles"
        st.wait_sends()
