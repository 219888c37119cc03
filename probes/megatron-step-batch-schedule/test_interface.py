"""Structural probe: the step-schedule calculator and the module functions expose the
parameter names and defaults that the prompt promises."""
# INFRADEV-PROBE-CANARY-4a512e54659f

import inspect

import megatron.core.num_microbatches_calculator as mbc


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
    assert issubclass(cls, mbc.NumMicroBatchesCalculator)
    sig = inspect.signature(cls.__init__)
    assert list(sig.parameters)[1:] == [
        "micro_batch_size", "data_parallel_size", "decrease_batch_size_if_needed", "rank",
        "schedule", "seq_length"]
    assert sig.parameters["seq_length"].default is None
    want = {"rank": inspect.Parameter.empty, "rampup_batch_size": None,
            "global_batch_size": None, "micro_batch_size": None, "data_parallel_size": None,
            "decrease_batch_size_if_needed": False, "step_batch_size_schedule": None,
            "seq_length": None}
    for fn in (mbc.init_num_microbatches_calculator, mbc.reconfigure_num_microbatches_calculator):
        params = inspect.signature(fn).parameters
        assert list(params) == list(want), (fn.__name__, list(params))
        for name, default in want.items():
            assert params[name].default == default, (fn.__name__, name)
    calc = cls(micro_batch_size=4, data_parallel_size=2, decrease_batch_size_if_needed=False,
               rank=0, schedule="0:24 10:48")
    assert calc.get_current_global_batch_size() == 24
    assert calc.get() == 3
    assert calc.get_micro_batch_size() == 4
