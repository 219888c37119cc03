"""Judge-side helpers for the pipeline-parallel send/receive probes: rank groups with vLLM's
own parallel state on gloo, a way to keep a subject-side result as a handle while every rank
is called at once, and the expected dictionaries (the sender's own tensors: a single-rank
reference, bit-exact since nothing is computed, only copied).

Nothing here imports vllm."""
# INFRADEV-PROBE-CANARY-7c2e91d4b0a6

import torch
from infradev_probe import subject_op

PS = "vllm.distributed.parallel_state"

# Every gloo operation of the groups (the world group and every group vLLM makes after it)
# gives up after WAIT_S: a send nobody receives, or a receive nothing arrives for, raises on
# its rank after WAIT_S instead of hanging until the test's timeout.
WAIT_S = 60


def init_parallel(group, tp, pp):
    """init_distributed_environment(backend="gloo") + initialize_model_parallel(tp, pp) on
    every rank at once; returns ([pp group handle per rank], [tp group handle per rank])."""
    n = len(group)
    timeouts = []
    for rank in group:
        _host_ip(rank)
        c10d = rank.module("torch.distributed.distributed_c10d")
        t = rank.module("datetime").timedelta(seconds=WAIT_S)
        # the default timeout of the groups made after the world group (torch's own knob)
        c10d.default_pg_timeout = t
        timeouts.append(t)
    group.call_all(PS, "init_distributed_environment", None, [
        dict(world_size=n, rank=r, distributed_init_method="env://", local_rank=r,
             backend="gloo", timeout=timeouts[r]) for r in range(n)])
    group.call_same(PS, "initialize_model_parallel", tensor_model_parallel_size=tp,
                    pipeline_model_parallel_size=pp, backend="gloo")
    pps = [rank.module(PS).get_pp_group() for rank in group]
    tps = [rank.module(PS).get_tp_group() for rank in group]
    return pps, tps


def _host_ip(rank):
    """VLLM_HOST_IP = the rank's own address when its host name resolves to one that is not
    loopback. Ranks in separate sandboxes (separate /dev/shm) count as separate nodes, so the
    TP group's message queue gets a remote reader and binds on vLLM's get_ip(), which asks
    the route to 8.8.8.8 (none on the group's internal network: it would fall back to
    0.0.0.0, which a peer cannot connect to). Ranks on one host never get there."""
    sock = rank.module("socket")
    try:
        ip = sock.gethostbyname(sock.gethostname())
    except Exception:  # a SubjectError: no usable name, leave vLLM's default
        return
    if isinstance(ip, str) and ip and not ip.startswith("127."):
        rank.module("os").environ["VLLM_HOST_IP"] = ip


def noop(rank):
    """A harmless callable of `rank` for the ranks that sit out a call_each."""
    return rank.module("torch.distributed").is_initialized


def call_each_kept(group, calls):
    """Calls calls[r] = (fn, args, kwargs) on every rank r at once (None: the rank sits out)
    and returns, per rank, a *handle* to fn's result (None for ranks that sat out).

    call_each brings results back by value, which would copy a received dictionary instead
    of keeping the subject's own (which the postprocess functions complete later). So each
    rank runs collections.deque(itertools.starmap(functools.partial(fn, *args, **kwargs),
    [()])): the same single call of fn, its result kept in a deque that stays in the rank."""
    fns, args = [], []
    for r, rank in enumerate(group):
        if calls[r] is None:
            fns.append(noop(rank))
            args.append(())
            continue
        fn, a, kw = calls[r]
        part = rank.module("functools").partial(fn, *a, **kw)
        lazy = rank.module("itertools").starmap(part, [()])
        fns.append(rank.module("collections").deque)
        args.append((lazy,))
    out = group.call_each(fns, args)
    kept = []
    for r, rank in enumerate(group):
        if calls[r] is None:
            kept.append(None)
        else:
            kept.append(rank.keep(rank.module("operator").getitem, out[r], 0))
    return kept


def item_kept(rank, h, i):
    return rank.keep(rank.module("operator").getitem, h, i)


def listed(h):
    """The items of a handle to a sequence (listed in its rank: the judge does not iterate
    handles), by value: a list whose items are values or handles of that rank."""
    return subject_op(h, "__iter__")


class Stages:
    """A pipeline exchange driven from the judge. Sends are waited at the start of the next
    exchange, as the worker does (`_pp_send_work`)."""

    def __init__(self, group, pps, tps):
        self.group, self.pps, self.tps = group, pps, tps
        self.pending = {r: [] for r in range(len(group))}

    def _kw(self, r, peer_key, peer, agt, tp):
        kw = {}
        if tp:
            kw["all_gather_group"] = self.tps[r]
        if agt is not None:
            kw["all_gather_tensors"] = agt
        if peer is not None:
            kw[peer_key] = peer
        return kw

    def wait_sends(self):
        for r, hs in self.pending.items():
            for h in hs:
                h.wait()
            self.pending[r] = []

    def post(self, sends, recvs, *, agt=None, tp=True, sync_send=False, sync_recv=False):
        """sends: {rank: (dict or dict handle, dst or None)}; recvs: {rank: src or None}.
        Posts every send and receive at once; returns {recv rank: kept result handle}."""
        self.wait_sends()
        calls = [None] * len(self.group)
        for r, (d, dst) in sends.items():
            fn = self.pps[r].send_tensor_dict if sync_send else self.pps[r].isend_tensor_dict
            calls[r] = (fn, (d,), self._kw(r, "dst", dst, agt, tp))
        for r, src in recvs.items():
            fn = self.pps[r].recv_tensor_dict if sync_recv else self.pps[r].irecv_tensor_dict
            calls[r] = (fn, (), self._kw(r, "src", src, agt, tp))
        kept = call_each_kept(self.group, calls)
        for r in sends:
            if sync_send:
                assert self.group[r].fetch(kept[r]) is None, "send_tensor_dict returns None"
            else:
                hs = listed(kept[r])
                d = sends[r][0]
                if isinstance(d, dict):  # the judge's own dict: count what must travel
                    n = sum(1 for v in d.values()
                            if isinstance(v, torch.Tensor) and v.numel() > 0)
                    assert len(hs) == n, (
                        f"rank {r}: isend_tensor_dict returned {len(hs)} handles, expected "
                        f"{n} (one per non-empty tensor)")
                self.pending[r] = hs
        return {r: kept[r] for r in recvs}

    def complete(self, results, n_handles=None):
        """The documented completion of irecv_tensor_dict on every receiving rank: wait every
        handle, then run the postprocess functions in order (all receivers of a TP group at
        once: they all-gather). Returns {rank: dict handle}."""
        g = self.group
        dicts, posts = {}, {}
        for r, res in results.items():
            rank = g[r]
            dicts[r] = item_kept(rank, res, 0)
            hs = listed(item_kept(rank, res, 1))
            if n_handles is not None:
                assert len(hs) == n_handles, (
                    f"rank {r}: irecv_tensor_dict returned {len(hs)} handles, "
                    f"expected {n_handles} (one per non-empty tensor)")
            for h in hs:
                h.wait()
            posts[r] = listed(item_kept(rank, res, 2))
        counts = {len(p) for p in posts.values()}
        assert len(counts) == 1, "receivers of one exchange got different postprocess lists"
        for i in range(counts.pop()):
            fns = [posts[r][i] if r in posts else noop(g[r]) for r in range(len(g))]
            g.call_each(fns)
        return dicts


def check_dict(got, want, what):
    """`got` (fetched from a rank) equals `want` (the sender's dict): same keys, tensors with
    the same dtype, shape and bits, other values equal."""
    assert isinstance(got, dict), f"{what}: not a dict: {type(got).__name__}"
    assert set(got) == set(want), f"{what}: keys {sorted(got)} != {sorted(want)}"
    for k, v in want.items():
        g = got[k]
        if isinstance(v, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"{what}: {k} is not a tensor"
            assert g.dtype == v.dtype, f"{what}: {k} dtype {g.dtype} != {v.dtype}"
            assert tuple(g.shape) == tuple(v.shape), (
                f"{what}: {k} shape {tuple(g.shape)} != {tuple(v.shape)}")
            assert g.device.type == "cpu", f"{what}: {k} on {g.device}"
            assert torch.equal(g, v), f"{what}: {k} differs from the sender's tensor"
        else:
            assert g == v and type(g) is type(v), f"{what}: {k} = {g!r} != {v!r}"


def make_dict(gen, tokens, hidden, *, odd=True, empty=True, extra=True):
    """A pipeline stage's intermediate tensors: hidden states and residual (divisible by any
    TP size up to 4 when hidden is), optionally a tensor whose element count is odd, an empty
    tensor and a non-tensor entry."""
    d = {
        "hidden_states": torch.randn(tokens, hidden, generator=gen),
        "residual": torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16),
    }
    if odd:
        d["positions"] = torch.randint(0, 1 << 40, (2 * tokens + 1,), generator=gen)
    if empty:
        d["aux_empty"] = torch.empty(0, hidden, dtype=torch.float16)
    if extra:
        d["step_tag"] = "tokens=%d" % tokens
        d["num_tokens"] = tokens
    return d
