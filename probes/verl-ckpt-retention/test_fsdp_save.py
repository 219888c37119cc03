"""State probe on the production save path: FSDPCheckpointManager.save_checkpoint with
max_ckpt_to_keep=1, where one save dies while writing (disk full), must not have deleted the
previous checkpoint first."""
# INFRADEV-PROBE-CANARY-81ddec5a5d69

import pytest
from infradev_probe import Handle, subject

from _remote_fs import exists, join, make_root, norm, remote_path, remove_root

PROBE_SECRET = "PROBE-SECRET-ckpt-fsdp-e913"

# Everything below lives in the subject sandbox: the process group, the model, the manager,
# the checkpoint directories, and the patched torch.save.
fsdp_checkpoint_manager = subject.module("verl.utils.checkpoint.fsdp_checkpoint_manager")
remote_torch = subject.module("torch")
remote_dist = subject.module("torch.distributed")
remote_transformers = subject.module("transformers")
remote_os = subject.module("os")


@pytest.fixture
def tmp_root():
    """A fresh directory in the subject (the judge's tmp_path is not visible there)."""
    root = make_root("ckpt-fsdp-")
    yield root
    remove_root(root)


@pytest.fixture
def process_group(tmp_root):
    """A real single-rank gloo group IN THE SUBJECT (file rendezvous in its own /tmp, no
    network), like a 1-GPU trainer."""
    generation = subject.generation
    remote_dist.init_process_group(
        backend="gloo", init_method=f"file://{tmp_root}/rendezvous", rank=0, world_size=1
    )
    yield
    if subject.generation == generation and remote_dist.is_initialized() is True:
        remote_dist.destroy_process_group()


def _tiny_model():
    remote_torch.manual_seed(0)
    cfg = remote_transformers.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
    )
    return remote_transformers.LlamaForCausalLM(cfg)


def _has_weights(path):
    return remote_path.isfile(join(path, "model_world_size_1_rank_0.pt")) is True


def _path_text(f):
    """The path torch.save was given (a str crosses by value; a path object is a handle whose
    os.fspath is asked of the subject); None for a file object."""
    if isinstance(f, str):
        return f
    if isinstance(f, Handle):
        try:
            text = remote_os.fspath(f)
        except TypeError:
            return None
        return text if isinstance(text, str) else None
    return None


def _tracked(paths):
    """previous_saved_paths, each made absolute in the subject."""
    assert isinstance(paths, list)
    return [remote_path.abspath(p) for p in paths]


def test_failed_save_keeps_previous_checkpoint(process_group, tmp_root):
    """Requirement: with max_ckpt_to_keep=1, FSDPCheckpointManager.save_checkpoint(local_path,
    global_step, max_ckpt_to_keep) keeps the previous checkpoint until the new one is fully
    written: a save that raises while writing leaves the previous checkpoint on disk and still
    tracked in previous_saved_paths; the next successful save removes it and only the newest
    checkpoint remains.

    The official tests exercise BaseCheckpointManager's helpers directly; none runs a real
    save_checkpoint, so a manager that never calls them (or calls them in the wrong order)
    passes them."""
    model = _tiny_model()
    optim = remote_torch.optim.SGD(model.parameters(), lr=0.1)
    mgr = fsdp_checkpoint_manager.FSDPCheckpointManager(
        model=model, optimizer=optim, lr_scheduler=None, processing_class=None, checkpoint_config=None
    )
    root = join(tmp_root, "ckpts")
    step_dir = lambda s: join(root, f"global_step_{s}")  # noqa: E731

    for step in (1, 2):
        mgr.save_checkpoint(local_path=step_dir(step), global_step=step, max_ckpt_to_keep=1)
    assert _has_weights(step_dir(2))
    assert not exists(step_dir(1)), "max_ckpt_to_keep=1 must remove older checkpoints"

    # Disk full while step 3 is written: torch.save is replaced IN THE SUBJECT by a judge
    # callback that raises OSError for files of global_step_3 and hands every other save to the
    # real torch.save (still in the subject); restored whatever happens.
    real_save = subject.getattr(remote_torch, "save")
    generation = subject.generation
    failed_writes = []

    def disk_full(obj, f, *args, **kwargs):
        path = _path_text(f)
        if path is not None and "global_step_3" in path:
            failed_writes.append(path)
            raise OSError(28, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    remote_torch.save = disk_full
    try:
        with pytest.raises(OSError):
            mgr.save_checkpoint(local_path=step_dir(3), global_step=3, max_ckpt_to_keep=1)
    finally:
        if subject.generation == generation:
            remote_torch.save = real_save
    assert failed_writes, "the failing save never wrote through torch.save"

    assert _has_weights(step_dir(2)), "the only complete checkpoint was deleted before the failed save"
    assert _tracked(mgr.previous_saved_paths) == [norm(step_dir(2))]

    mgr.save_checkpoint(local_path=step_dir(4), global_step=4, max_ckpt_to_keep=1)
    assert _has_weights(step_dir(4))
    assert not exists(step_dir(2))
    assert _tracked(mgr.previous_saved_paths) == [norm(step_dir(4))]
