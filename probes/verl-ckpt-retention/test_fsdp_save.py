"""State probe on the production save path: FSDPCheckpointManager.save_checkpoint with
max_ckpt_to_keep=1, where one save dies while writing (disk full), must not have deleted the
previous checkpoint first."""
# INFRADEV-PROBE-CANARY-81ddec5a5d69

import os

import pytest
import torch
import torch.distributed as dist

PROBE_SECRET = "PROBE-SECRET-ckpt-fsdp-e913"


@pytest.fixture
def process_group(tmp_path):
    """A real single-rank gloo group (file rendezvous, no network), like a 1-GPU trainer."""
    dist.init_process_group(
        backend="gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


def _tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
    )
    return LlamaForCausalLM(cfg)


def _has_weights(path):
    return os.path.isfile(os.path.join(path, "model_world_size_1_rank_0.pt"))


def test_failed_save_keeps_previous_checkpoint(process_group, tmp_path, monkeypatch):
    """Requirement: with max_ckpt_to_keep=1, FSDPCheckpointManager.save_checkpoint(local_path,
    global_step, max_ckpt_to_keep) keeps the previous checkpoint until the new one is fully
    written: a save that raises while writing leaves the previous checkpoint on disk and still
    tracked in previous_saved_paths; the next successful save removes it and only the newest
    checkpoint remains.

    The official tests exercise BaseCheckpointManager's helpers directly; none runs a real
    save_checkpoint, so a manager that never calls them (or calls them in the wrong order)
    passes them."""
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    model = _tiny_model()
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    mgr = FSDPCheckpointManager(
        model=model, optimizer=optim, lr_scheduler=None, processing_class=None, checkpoint_config=None
    )
    root = tmp_path / "ckpts"
    step_dir = lambda s: str(root / f"global_step_{s}")  # noqa: E731

    for step in (1, 2):
        mgr.save_checkpoint(local_path=step_dir(step), global_step=step, max_ckpt_to_keep=1)
    assert _has_weights(step_dir(2))
    assert not os.path.exists(step_dir(1)), "max_ckpt_to_keep=1 must remove older checkpoints"

    real_save = torch.save

    def disk_full(obj, f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)) and "global_step_3" in str(f):
            raise OSError(28, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError):
        mgr.save_checkpoint(local_path=step_dir(3), global_step=3, max_ckpt_to_keep=1)
    monkeypatch.setattr(torch, "save", real_save)

    assert _has_weights(step_dir(2)), "the only complete checkpoint was deleted before the failed save"
    assert [os.path.abspath(p) for p in mgr.previous_saved_paths] == [os.path.abspath(step_dir(2))]

    mgr.save_checkpoint(local_path=step_dir(4), global_step=4, max_ckpt_to_keep=1)
    assert _has_weights(step_dir(4))
    assert not os.path.exists(step_dir(2))
    assert [os.path.abspath(p) for p in mgr.previous_saved_paths] == [os.path.abspath(step_dir(4))]
