"""The public interface the change adds (signatures and defaults)."""
# INFRADEV-PROBE-CANARY-7c2e91d4b0a6

from infradev_probe import subject

PS = "vllm.distributed.parallel_state"
GW = "vllm.v1.worker.gpu_worker"


def _params(fn):
    return [(p.name, p.default if p.default is not p.empty else "<required>")
            for p in subject.signature(fn).parameters.values()]


def test_public_interface():
    """Requirement: GroupCoordinator.isend_tensor_dict(self, tensor_dict, dst=None,
    all_gather_group=None, all_gather_tensors=None) and irecv_tensor_dict(self, src=None,
    all_gather_group=None, all_gather_tensors=None) exist beside the unchanged
    send_tensor_dict / recv_tensor_dict; AsyncIntermediateTensors(tensors, comm_handles=None,
    comm_postprocess=None) in vllm.v1.worker.gpu_worker is an IntermediateTensors subclass
    with wait_for_comm().

    The official tests pass every argument by keyword or leave them out, so other names,
    positions or defaults pass them."""
    gc = subject.module(PS).GroupCoordinator
    assert _params(gc.isend_tensor_dict) == [
        ("self", "<required>"), ("tensor_dict", "<required>"), ("dst", None),
        ("all_gather_group", None), ("all_gather_tensors", None)]
    assert _params(gc.irecv_tensor_dict) == [
        ("self", "<required>"), ("src", None), ("all_gather_group", None),
        ("all_gather_tensors", None)]
    assert _params(gc.send_tensor_dict) == [
        ("self", "<required>"), ("tensor_dict", "<required>"), ("dst", None),
        ("all_gather_group", None), ("all_gather_tensors", None)]
    assert _params(gc.recv_tensor_dict) == [
        ("self", "<required>"), ("src", None), ("all_gather_group", None),
        ("all_gather_tensors", None)]
    ait = subject.module(GW).AsyncIntermediateTensors
    assert _params(ait) == [("tensors", "<required>"), ("comm_handles", None),
                            ("comm_postprocess", None)]
    issub = subject.module("builtins").issubclass
    assert issub(ait, subject.module("vllm.sequence").IntermediateTensors)
    assert callable(ait.wait_for_comm)
