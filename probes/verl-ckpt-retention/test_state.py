"""State probes for checkpoint retention: across many save steps, with saves that fail between
making room and registering the new checkpoint, the newest complete checkpoint is never lost
and exactly the newest max_ckpt_to_keep complete checkpoints remain after each success."""
# INFRADEV-PROBE-CANARY-81ddec5a5d69

import random

import pytest
from infradev_probe import subject, workload_seed

from _remote_fs import complete, complete_many, make_root, norm, remote_path, remove_root, write_ckpt

PROBE_SECRET = "PROBE-SECRET-ckpt-state-2a6c"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

# The submission runs in the subject sandbox; the checkpoint directories live in its file
# system (see _remote_fs.py) and the manager is a handle to an object living there.
checkpoint_manager = subject.module("verl.utils.checkpoint.checkpoint_manager")
remote_dist = subject.module("torch.distributed")
remote_builtins = subject.module("builtins")


@pytest.fixture
def tmp_root():
    """A fresh directory in the subject (the judge's tmp_path is not visible there)."""
    root = make_root("ckpt-state-")
    yield root
    remove_root(root)


@pytest.fixture
def manager():
    """A BaseCheckpointManager as the trainer's rank 0 sees it (single process, no group):
    torch.distributed.get_rank / get_world_size are patched IN THE SUBJECT (judge callbacks
    answering 0 and 1) for the test, and restored afterwards."""
    real = {name: subject.getattr(remote_dist, name) for name in ("get_rank", "get_world_size")}
    generation = subject.generation
    remote_dist.get_rank = lambda *a, **k: 0
    remote_dist.get_world_size = lambda *a, **k: 1
    try:
        yield checkpoint_manager.BaseCheckpointManager(
            model=remote_builtins.object(), optimizer=remote_builtins.object(), lr_scheduler=None,
            processing_class=None, checkpoint_config=None,
        )
    finally:
        if subject.generation == generation:  # a replaced subject has pristine modules
            for name, fn in real.items():
                setattr(remote_dist, name, fn)


def _tracked(paths):
    """previous_saved_paths, each made absolute in the subject (one round trip)."""
    assert isinstance(paths, list)
    abspath = remote_path.abspath
    with subject.batch() as b:
        for p in paths:
            b.call(abspath, p)
    return list(b.results)


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_failed_saves_never_lose_latest_checkpoint(manager, tmp_root, keep):
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
        must_survive = successes[-(keep - 1):] if keep > 1 else successes[-1:]
        if successes:
            alive = complete_many([successes[-1]] + must_survive)
            assert alive[0], f"step {step}: newest checkpoint deleted before saving"
            for p, ok in zip(must_survive, alive[1:]):
                assert ok, f"step {step}: {p} deleted although fewer than {keep} would remain"
        path = write_ckpt(tmp_root, step)
        if rng.random() < 0.3:  # the save raised after making room: nothing is registered
            failed.append(path)
            continue
        manager.register_checkpoint(new_path=path, max_ckpt_to_keep=keep)
        successes.append(path)
        expected = successes[-keep:]
        assert _tracked(manager.previous_saved_paths) == [norm(p) for p in expected]
        for p, present in zip(successes, complete_many(successes)):
            assert present == (p in expected), f"step {step}: {p} present={present}"
    assert len(successes) > 30 and len(failed) > 5
    # partial saves the manager never owned are not its to delete
    assert all(complete_many(failed))


@pytest.mark.parametrize("keep", [0, None])
def test_unlimited_keeps_everything(manager, tmp_root, keep):
    """Requirement: max_ckpt_to_keep = 0 or None means unlimited: 25 save steps (some failing)
    delete nothing and previous_saved_paths lists every registered checkpoint in order.

    The official test checks only one save with max_ckpt_to_keep=0 and never None."""
    rng = random.Random(SEED + 99)
    successes = []
    for step in range(1, 26):
        manager.ensure_checkpoint_capacity(max_ckpt_to_keep=keep)
        path = write_ckpt(tmp_root, step)
        if rng.random() < 0.2:
            continue
        manager.register_checkpoint(new_path=path, max_ckpt_to_keep=keep)
        successes.append(path)
    assert manager.previous_saved_paths == successes
    assert all(complete_many(successes))


def test_lower_limit_after_resume_prunes_to_limit(manager, tmp_root):
    """Requirement: when the manager tracks more checkpoints than the limit (e.g. the limit was
    lowered between runs), one successful register brings it down to exactly the newest k,
    including the new one; and making room for k = 1 never deletes anything.

    The official tests always start from at most k tracked checkpoints."""
    old = [write_ckpt(tmp_root, s) for s in (10, 20, 30, 40, 50)]
    manager.previous_saved_paths = list(old)
    manager.ensure_checkpoint_capacity(max_ckpt_to_keep=1)
    assert all(complete_many(old)) and manager.previous_saved_paths == old
    new = write_ckpt(tmp_root, 60)
    manager.register_checkpoint(new_path=new, max_ckpt_to_keep=2)
    assert manager.previous_saved_paths == [old[-1], new]
    assert complete(new) and complete(old[-1])
    assert not any(complete_many(old[:-1]))
