"""State probe across ranks: in a real two-rank gloo group, FSDPCheckpointManager.save_checkpoint
prunes old checkpoints on rank 0 only. Each rank is a sandbox with a file system of its own, so
what a rank deletes is seen on that rank alone."""
# INFRADEV-PROBE-CANARY-81ddec5a5d69

import posixpath

from infradev_probe import subject

PROBE_SECRET = "PROBE-SECRET-ckpt-ranks-4b17"

WORLD = 2
KEEP = 2
MODULE = "verl.utils.checkpoint.fsdp_checkpoint_manager"


def test_only_rank_zero_prunes():
    """Requirement: only the process that deleted checkpoints before the change prunes (rank 0
    for FSDP). Both ranks' managers track two checkpoints an earlier save left (a resumed
    manager), then run save_checkpoint(max_ckpt_to_keep=2) for three steps together: rank 0
    ends with only its two newest checkpoint directories; rank 1 deletes none of its
    directories, neither while making room before a save nor after one (on a shared file
    system a second pruning rank races rank 0's deletes).

    The official tests call the helpers on one BaseCheckpointManager and never run a save on
    more than one rank."""
    with subject.ranks(WORLD) as group:
        group.call_same("torch.distributed", "init_process_group", backend="gloo")
        managers, dirs = [], []
        for rank in group:
            torch = rank.module("torch")
            transformers = rank.module("transformers")
            torch.manual_seed(0)
            cfg = transformers.LlamaConfig(
                vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
            )
            model = transformers.LlamaForCausalLM(cfg)
            optim = torch.optim.SGD(model.parameters(), lr=0.1)
            manager = rank.module(MODULE).FSDPCheckpointManager(
                model=model, optimizer=optim, lr_scheduler=None, processing_class=None,
                checkpoint_config=None,
            )
            root = posixpath.normpath(rank.module("tempfile").mkdtemp(prefix="ckpt-ranks-"))
            steps = [posixpath.join(root, f"global_step_{s}") for s in (1, 2, 3, 4, 5)]
            for old in steps[:2]:  # what an earlier run of this manager saved and kept
                rank.module("os").makedirs(old)
                rank.module("pathlib").Path(posixpath.join(old, "model.pt")).write_text("old")
            manager.previous_saved_paths = list(steps[:2])
            managers.append(manager)
            dirs.append(steps)
        for i, step in enumerate((3, 4, 5), start=2):
            group.call_each(
                [m.save_checkpoint for m in managers],
                kwargs=[{"local_path": dirs[r][i], "global_step": step, "max_ckpt_to_keep": KEEP}
                        for r in range(WORLD)],
            )
        rank0, rank1 = (
            [rank.module("os.path").isdir(p) is True for p in dirs[rank.rank]] for rank in group
        )
        assert rank0 == [False, False, False, True, True], (
            f"rank 0 keeps {rank0} of steps 1-5 with max_ckpt_to_keep={KEEP}")
        assert rank1 == [True] * 5, f"rank 1 deleted checkpoints: it keeps {rank1} of steps 1-5"
