"""The CPU custom send/receive path (a CPU build of vLLM, use_cpu_custom_send_recv) hands the
whole dictionary to the device communicator with the peer resolved: dst/src default to the
next/previous rank of the group there too. The communicator is a judge callback recorder."""
# INFRADEV-PROBE-CANARY-7c2e91d4b0a6

import torch
from infradev_probe import subject

PS = "vllm.distributed.parallel_state"


def _group(world_size, rank_in_group, comm):
    dist = subject.module("torch.distributed")
    if not dist.is_initialized():
        dist.init_process_group(backend="gloo", store=dist.HashStore(), rank=0, world_size=1)
    ps = subject.module(PS)
    g = ps.GroupCoordinator([[0]], 0, "gloo", False)
    # stand for one rank of a larger group on the CPU custom path
    g.world_size = world_size
    g.rank_in_group = rank_in_group
    g.ranks = list(range(world_size))
    g.use_cpu_custom_send_recv = True
    g.device_communicator = comm
    return g


def test_cpu_custom_path_default_peers():
    """Requirement: on a group whose use_cpu_custom_send_recv is true, isend_tensor_dict(d)
    calls device_communicator.send_tensor_dict(d, dst) once with dst = (rank_in_group + 1) %
    world_size when dst is None (an explicit dst as given) and returns no handles;
    irecv_tensor_dict() calls device_communicator.recv_tensor_dict(src) once with src =
    (rank_in_group - 1) % world_size when src is None and returns (that dict, [], []); the
    blocking send_tensor_dict / recv_tensor_dict behave the same (recv returns the dict).
    Checked for rank_in_group 0 and 3 of 4 (wrapping both ways).

    The official tests never take this path (it needs vLLM's CPU kernels); passing dst/src as
    None to the communicator (as #33368 did before #35754) passes them."""
    sent, recvd = [], []
    payload = {"hidden_states": torch.arange(8, dtype=torch.float32).reshape(2, 4)}

    def send_tensor_dict(tensor_dict, dst):
        sent.append((sorted(tensor_dict), dst))

    def recv_tensor_dict(src):
        recvd.append(src)
        return payload

    comm = subject.module("types").SimpleNamespace(
        send_tensor_dict=send_tensor_dict, recv_tensor_dict=recv_tensor_dict)
    d = {"hidden_states": torch.ones(2, 4), "residual": torch.zeros(2, 4)}
    for rank_in_group, nxt, prv in ((3, 0, 2), (0, 1, 3)):
        sent.clear()
        recvd.clear()
        g = _group(4, rank_in_group, comm)
        assert list(g.isend_tensor_dict(d)) == []
        assert sent == [(["hidden_states", "residual"], nxt)], f"isend default dst: {sent}"
        sent.clear()
        assert list(g.isend_tensor_dict(d, dst=2 if rank_in_group != 2 else 1)) == []
        assert sent == [(["hidden_states", "residual"], 2)], f"isend explicit dst: {sent}"
        sent.clear()
        td, hs, post = g.irecv_tensor_dict()
        assert recvd == [prv], f"irecv default src: {recvd}"
        assert list(hs) == [] and list(post) == []
        assert set(td) == {"hidden_states"} and torch.equal(td["hidden_states"],
                                                            payload["hidden_states"])
        recvd.clear()
        g.send_tensor_dict(d)
        assert sent == [(["hidden_states", "residual"], nxt)], f"send default dst: {sent}"
        td = g.recv_tensor_dict()
        assert recvd == [prv], f"recv default src: {recvd}"
        assert torch.equal(td["hidden_states"], payload["hidden_states"])
