"""State probes for checkpoint retention: across many save steps, with saves that fail between
making room and registering the new checkpoint, the newest complete checkpoint is never lost
and exactly the newest max_ckpt_to_keep complete checkpoints remain after each success."""
# INFRADEV-PROBE-CANARY-81ddec5a5d69

import os
import random
import zlib

import pytest

PROBE_SECRET = "PROBE-SECRET-ckpt-state-2a6c"
SEED = zlib.crc32(PROBE_SECRET.encode())


@pytest.fixture
def manager(monkeypatch):
    """A BaseCheckpointManager as the trainer's rank 0 sees it (single process, no group)."""
    import torch.distributed

    monkeypatch.setattr(torch.distributed, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *a, **k: 1)
    from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

    return BaseCheckpointManager(
        model=object(), optimizer=object(), lr_scheduler=None, processing_class=None, checkpoint_config=None
    )


def _write_ckpt(root, step):
    path = os.path.join(str(root), f"global_step_{step}")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.pt"), "w") as f:
        f.write(f"weights of step {step}")
    return path


def _complete(path):
    return os.path.isfile(os.path.join(path, "model.pt"))


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_failed_saves_never_lose_latest_checkpoint(manager, tmp_path, keep):
    """Requirement: in the save sequence ensure_checkpoint_capacity(k) -> write -> 
    register_checkpoint(path, k), repeated for 60 steps with ~30% of saves failing after the
    room was made (never registered), (1) making room never deletes the newest successfully
    registered checkpoint, and for k >= 2 keeps at least the newest k - 1; (2) after every
    successful register exactly the newest min(k, successes) registered checkpoints exist on
    disk and previous_saved_paths lists them oldest first; (3) the path just registered is
    never deleted; (4) directories the manager never registered are left alone.

    The official tests run at most three successful saves in a row and never a failure between
    the two calls."""
    rng = random.Random(SEED + keep)
    successes = []
    failed = []
    for step in range(1, 61):
        manager.ensure_checkpoint_capacity(max_ckpt_to_keep=keep)
        if successes:
            assert _complete(successes[-1]), f"step {step}: newest checkpoint deleted before saving"
        must_survive = successes[-(keep - 1):] if keep > 1 else successes[-1:]
        for p in must_survive:
            assert _complete(p), f"step {step}: {p} deleted although fewer than {keep} would remain"
        path = _write_ckpt(tmp_path, step)
        if rng.random() < 0.3:  # the save raised after making room: nothing is registered
            failed.append(path)
            continue
        manager.register_checkpoint(new_path=path, max_ckpt_to_keep=keep)
        successes.append(path)
        expected = successes[-keep:]
        assert [os.path.abspath(p) for p in manager.previous_saved_paths] == [os.path.abspath(p) for p in expected]
        for p in successes:
            assert _complete(p) == (p in expected), f"step {step}: {p} present={_complete(p)}"
    assert len(successes) > 30 and len(failed) > 5
    for p in failed:  # partial saves the manager never owned are not its to delete
        assert _complete(p)


@pytest.mark.parametrize("keep", [0, None])
def test_unlimited_keeps_everything(manager, tmp_path, keep):
    """Requirement: max_ckpt_to_keep = 0 or None means unlimited: 25 save steps (some failing)
    delete nothing and previous_saved_paths lists every registered checkpoint in order.

    The official test checks only one save with max_ckpt_to_keep=0 and never None."""
    rng = random.Random(SEED + 99)
    successes = []
    for step in range(1, 26):
        manager.ensure_checkpoint_capacity(max_ckpt_to_keep=keep)
        path = _write_ckpt(tmp_path, step)
        if rng.random() < 0.2:
            continue
        manager.register_checkpoint(new_path=path, max_ckpt_to_keep=keep)
        successes.append(path)
    assert manager.previous_saved_paths == successes
    assert all(_complete(p) for p in successes)


def test_lower_limit_after_resume_prunes_to_limit(manager, tmp_path):
    """Requirement: when the manager tracks more checkpoints than the limit (e.g. the limit was
    lowered between runs), one successful register brings it down to exactly the newest k,
    including the new one; and making room for k = 1 never deletes anything.

    The official tests always start from at most k tracked checkpoints."""
    old = [_write_ckpt(tmp_path, s) for s in (10, 20, 30, 40, 50)]
    manager.previous_saved_paths = list(old)
    manager.ensure_checkpoint_capacity(max_ckpt_to_keep=1)
    assert all(_complete(p) for p in old) and manager.previous_saved_paths == old
    new = _write_ckpt(tmp_path, 60)
    manager.register_checkpoint(new_path=new, max_ckpt_to_keep=2)
    assert manager.previous_saved_paths == [old[-1], new]
    assert _complete(new) and _complete(old[-1])
    assert not any(_complete(p) for p in old[:-1])
