"""Structural probe: the retention hooks promised by the task prompt exist on
BaseCheckpointManager with the documented parameter names."""
# INFRADEV-PROBE-CANARY-81ddec5a5d69

from infradev_probe import subject

PROBE_SECRET = "PROBE-SECRET-ckpt-interface-77d0"

checkpoint_manager = subject.module("verl.utils.checkpoint.checkpoint_manager")
fsdp_checkpoint_manager = subject.module("verl.utils.checkpoint.fsdp_checkpoint_manager")


def test_public_interface():
    """Requirement: `BaseCheckpointManager` (verl.utils.checkpoint.checkpoint_manager) has
    `ensure_checkpoint_capacity(max_ckpt_to_keep)` and `register_checkpoint(new_path,
    max_ckpt_to_keep)`, both callable with keyword arguments, and `FSDPCheckpointManager`
    inherits them.

    The official tests call both methods on a BaseCheckpointManager only, partly positionally,
    and never check that the FSDP manager shares them."""
    ensure = subject.signature(checkpoint_manager.BaseCheckpointManager.ensure_checkpoint_capacity)
    assert list(ensure.parameters)[:2] == ["self", "max_ckpt_to_keep"]
    register = subject.signature(checkpoint_manager.BaseCheckpointManager.register_checkpoint)
    assert list(register.parameters)[:3] == ["self", "new_path", "max_ckpt_to_keep"]
    FSDPCheckpointManager = fsdp_checkpoint_manager.FSDPCheckpointManager
    assert subject.issubclass(FSDPCheckpointManager, checkpoint_manager.BaseCheckpointManager) is True
    for name, params in (("ensure_checkpoint_capacity", ["self", "max_ckpt_to_keep"]),
                         ("register_checkpoint", ["self", "new_path", "max_ckpt_to_keep"])):
        method = subject.getattr(FSDPCheckpointManager, name)
        assert subject.describe(method)["callable"], name
        # Inherited (or overridden) with the same keywords: the trainer calls them by name.
        assert list(subject.signature(method).parameters)[:len(params)] == params, name
