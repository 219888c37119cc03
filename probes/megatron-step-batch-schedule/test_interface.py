"""Structural probe: the step-schedule calculator and the module functions expose the
parameter names and defaults that the prompt promises."""
# INFRADEV-PROBE-CANARY-4a512e54659f

import inspect

from infradev_probe import subject

# The submission runs in the subject sandbox; `mbc` is a proxy for its module.
mbc = subject.module("megatron.core.num_microbatches_calculator")


def test_public_interface():
    """Requirement: StepBatchsizeNumMicroBatchesCalculator(micro_batch_size, data_parallel_size,
    decrease_batch_size_if_needed, rank, schedule, seq_length=None) subclasses
    NumMicroBatchesCalculator; init_num_microbatches_calculator and
    reconfigure_num_microbatches_calculator take (rank, rampup_batch_size=None,
    global_batch_size=None, micro_batch_size=None, data_parallel_size=None,
    decrease_batch_size_if_needed=False, step_batch_size_schedule=None, seq_length=None); the
    constructor works with keyword arguments and the initial batch size is the first entry's.

    The official tests construct the class with keywords but never check the module functions'
    signatures or defaults."""
    cls = mbc.StepBatchsizeNumMicroBatchesCalculator
    assert subject.issubclass(cls, mbc.NumMicroBatchesCalculator) is True
    sig = subject.signature(subject.getattr(cls, "__init__"))
    assert list(sig.parameters)[1:] == [
        "micro_batch_size", "data_parallel_size", "decrease_batch_size_if_needed", "rank",
        "schedule", "seq_length"]
    assert sig.parameters["seq_length"].default is None
    want = {"rank": inspect.Parameter.empty, "rampup_batch_size": None,
            "global_batch_size": None, "micro_batch_size": None, "data_parallel_size": None,
            "decrease_batch_size_if_needed": False, "step_batch_size_schedule": None,
            "seq_length": None}
    for fn_name, fn in (("init_num_microbatches_calculator", mbc.init_num_microbatches_calculator),
                        ("reconfigure_num_microbatches_calculator",
                         mbc.reconfigure_num_microbatches_calculator)):
        params = subject.signature(fn).parameters
        assert list(params) == list(want), (fn_name, list(params))
        for name, default in want.items():
            assert params[name].default == default, (fn_name, name)
    calc = cls(micro_batch_size=4, data_parallel_size=2, decrease_batch_size_if_needed=False,
               rank=0, schedule="0:24 10:48")
    assert calc.get_current_global_batch_size() == 24
    assert calc.get() == 3
    assert calc.get_micro_batch_size() == 4
