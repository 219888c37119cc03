"""The GPU worker's pipeline step: Worker.execute_model on 4 gloo ranks (PP 2 x TP 2) with
vLLM's own parallel state. Each rank holds a Worker made without its constructor (no engine,
no GPU) and a model runner that is a plain subject-side callable: stage 0's returns a stored
IntermediateTensors, stage 1's records what it is given. Judge callables cannot be sent to a
rank, so what the worker does is read back from subject-side objects: the intermediate
tensors the model was given, the worker's pending sends, and counters standing in for
pending handles."""
# INFRADEV-PROBE-CANARY-7c2e91d4b0a6

import torch
from infradev_probe import subject, workload_seed

import _pp as P

PROBE_SECRET = "PROBE-SECRET-pp-worker-91b4e6"
SEED = workload_seed(PROBE_SECRET)  # moves with INFRADEV_PROBE_SEED (tasks power, seed 1)

GW = "vllm.v1.worker.gpu_worker"
SENDERS, RECEIVERS = (0, 1), (2, 3)


def _gen(k):
    return torch.Generator().manual_seed(SEED * 100 + k)


def _worker(rank, model_call):
    """A Worker of a PP 2 stage as the prompt's tests build it: Worker.__new__, then the
    attributes execute_model reads."""
    W = rank.module(GW).Worker
    w = rank.getattr(W, "__new__")(W)  # rank.getattr: the handle's own dunders are local
    ns = rank.module("types").SimpleNamespace
    w.vllm_config = ns(
        compilation_config=ns(pass_config=ns(enable_sp=False)),
        parallel_config=ns(pipeline_parallel_size=2, distributed_executor_backend="mp"))
    w.profiler = None
    w.use_v2_model_runner = False
    w.model_runner = ns(execute_model=model_call)
    w._pp_send_work = []
    return w


def _n_transferred(d):
    return sum(1 for v in d.values() if isinstance(v, torch.Tensor) and v.numel() > 0)


def test_worker_async_pipeline_step():
    """Requirement: on 4 gloo ranks (PP 2 x TP 2), Worker.execute_model(scheduler_output) on
    both stages at once, for 3 steps: each stage-0 worker calls
    model_runner.execute_model(scheduler_output, None), starts sending the returned
    IntermediateTensors' tensors with isend_tensor_dict (all_gather_group = the TP group),
    keeps the returned handles in self._pp_send_work (one per non-empty tensor) and returns
    None; at the start of its next execute_model it waits every pending handle once and
    drops them. Each stage-1 worker receives with irecv_tensor_dict (all_gather_group = the TP
    group) and passes model_runner.execute_model(scheduler_output, it) an
    AsyncIntermediateTensors whose tensors, once read on both TP ranks, are the sender's
    dictionary bit for bit (split tensors all-gathered), and returns the model's output.

    The official tests never run the worker: dropping the send, not keeping or not waiting its
    handles, or receiving without the TP group passes them."""
    gen = _gen(0)
    dicts = [P.make_dict(gen, tokens, 64, extra=False) for tokens in (8, 3, 6)]
    with subject.ranks(4) as group:
        P.init_parallel(group, tp=2, pp=2)
        sos, models, seen, workers = [], {}, {}, {}
        for r, rank in enumerate(group):
            coll = rank.module("collections")
            SO = coll.namedtuple("SchedulerOutput", ["total_num_scheduled_tokens"])
            steps = [SO(int(d["hidden_states"].shape[0])) for d in dicts]
            sos.append(steps)
            if r in SENDERS:
                it_cls = rank.module("vllm.sequence").IntermediateTensors
                models[r] = rank.put({})
                for so, d in zip(steps, dicts):
                    models[r][so] = it_cls(d)
                workers[r] = _worker(rank, rank.getattr(models[r], "get"))
            else:
                seen[r] = rank.put({})
                workers[r] = _worker(rank, rank.getattr(seen[r], "__setitem__"))

        counters = {}
        for k, d in enumerate(dicts):
            if k:
                # the previous step's sends: completed (the receivers hold the data); the
                # judge waits them and leaves stand-ins that count their waits instead
                counters = {}
                for r in SENDERS:
                    rank, w = group[r], workers[r]
                    for h in list(w._pp_send_work):
                        h.wait()
                    cs = [rank.getattr(rank.module("itertools").count(), "__next__")
                          for _ in range(2)]
                    ns = rank.module("types").SimpleNamespace
                    never = rank.module("builtins").bool  # bool() is False: not completed
                    w._pp_send_work = [ns(wait=c, is_completed=never) for c in cs]
                    counters[r] = cs
            out = group.call_each([workers[r].execute_model for r in range(4)],
                                  [(sos[r][k],) for r in range(4)])
            assert list(out) == [None] * 4, f"step {k}: execute_model returned {out!r}"
            for r, cs in counters.items():
                waits = [group[r].call(c) for c in cs]
                assert waits == [1, 1], (
                    f"step {k}, rank {r}: the previous step's pending send handles were "
                    f"waited {waits} times at the start of execute_model (expected once each)")
            for r in SENDERS:
                pending = list(workers[r]._pp_send_work)
                assert len(pending) == _n_transferred(d), (
                    f"step {k}, rank {r}: {len(pending)} pending send handles kept in "
                    f"_pp_send_work, expected {_n_transferred(d)} (one per non-empty tensor)")
            gw = {r: group[r].module(GW) for r in RECEIVERS}
            its = {}
            for r in RECEIVERS:
                rank = group[r]
                its[r] = rank.keep(rank.module("operator").getitem, seen[r], sos[r][k])
                assert rank.isinstance(its[r], gw[r].AsyncIntermediateTensors), (
                    f"step {k}, rank {r}: the model was not given an AsyncIntermediateTensors")
            # the first .tensors read completes the exchange: the TP all-gather, collective
            # over both stage-1 ranks, so both read at once
            got = group.call_each(
                [group[r].module("operator").attrgetter("tensors") if r in its
                 else P.noop(group[r]) for r in range(4)],
                [(its[r],) if r in its else () for r in range(4)])
            for r in RECEIVERS:
                P.check_dict(got[r], d, f"step {k}: rank {r}")
        for r in SENDERS:
            for h in list(workers[r]._pp_send_work):
                h.wait()
