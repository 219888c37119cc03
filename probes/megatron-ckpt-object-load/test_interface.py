"""The public interface the task states: FullyParallelLoadStrategyWrapper's constructor."""
# INFRADEV-PROBE-CANARY-5b1f07c2e9a4

from infradev_probe import subject

FP = "megatron.core.dist_checkpointing.strategies.fully_parallel"


def test_public_interface():
    fp = subject.module(FP)
    sig = subject.signature(fp.FullyParallelLoadStrategyWrapper)
    names = list(sig.parameters)
    assert names[:5] == ["strategy", "parallelization_group", "do_cache_distribution",
                         "exchange_algo", "per_rank_object_load"], names
    p = sig.parameters
    assert p["parallelization_group"].default is None
    assert p["do_cache_distribution"].default is False
    assert p["exchange_algo"].default == "broadcast"
    assert p["per_rank_object_load"].default is False
    # Set by keyword, kept where load() can read it (a plain attribute of the wrapper).
    ts = subject.module("megatron.core.dist_checkpointing.strategies.torch")
    w = fp.FullyParallelLoadStrategyWrapper(ts.TorchDistLoadShardedStrategy(),
                                            per_rank_object_load=True)
    assert w.per_rank_object_load is True
    w = fp.FullyParallelLoadStrategyWrapper(ts.TorchDistLoadShardedStrategy())
    assert w.per_rank_object_load is False
