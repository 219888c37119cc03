"""Code the probes install in the subject (not a probe itself): a stand-in tokenizer and
instrumented compute_score functions, written as a module file into the subject's /tmp and
imported there, so that the manager can await them on its own event loop (a judge callback
cannot be a coroutine function, and is refused from the manager's executor threads).

What the instrumentation records (in-flight count, calls, cancellations) lives in the subject;
times are never read from the subject's clock: the broker measures them (`subject_ns`)."""
# INFRADEV-PROBE-CANARY-7f3b2c9e4d10

from infradev_probe import subject

MODULE = "_infradev_rl_scores"

SOURCE = r'''
import asyncio
import json
import threading
import time


class Tokenizer:
    """decode(ids) -> the ids as decimal numbers joined by one space. Ids below 100 are special
    tokens: left out with skip_special_tokens=True, written as <sN> otherwise."""

    def decode(self, ids, skip_special_tokens=False, **kwargs):
        words = []
        for i in (int(i) for i in ids):
            if i >= 100:
                words.append(str(i))
            elif not skip_special_tokens:
                words.append(f"<s{i}>")
        return " ".join(words)


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls = 0
        self.cancelled = 0
        self.kwargs_seen = []

    def enter(self, kwargs):
        with self.lock:
            self.calls += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.kwargs_seen.append(sorted(kwargs))

    def leave(self):
        with self.lock:
            self.in_flight -= 1

    def state(self):
        with self.lock:
            return {"in_flight": self.in_flight, "max_in_flight": self.max_in_flight,
                    "calls": self.calls, "cancelled": self.cancelled}


REC = Recorder()


def reset():
    global REC
    REC = Recorder()


def _outcome(spec, solution_str):
    if solution_str != spec["text"]:
        return -100.0
    if spec.get("mode") == "raise":
        raise ValueError("scripted failure")
    if spec.get("mode") == "dict":
        return {"score": spec["score"], "label": spec["label"]}
    return spec["score"]


async def score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    spec = json.loads(ground_truth)
    REC.enter(kwargs)
    try:
        await asyncio.sleep(spec.get("delay", 0.0))
        return _outcome(spec, solution_str)
    except asyncio.CancelledError:
        REC.cancelled += 1
        raise
    finally:
        REC.leave()


async def score_plain(data_source, solution_str, ground_truth, extra_info):
    """No **kwargs: the signature of a user's own reward function."""
    return await score(data_source, solution_str, ground_truth, extra_info)


def score_sync(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    spec = json.loads(ground_truth)
    REC.enter(kwargs)
    try:
        time.sleep(spec.get("delay", 0.0))
        return _outcome(spec, solution_str)
    finally:
        REC.leave()


def new_loop():
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop


def close_loop(loop):
    try:
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


async def _sequential(bucket, amounts):
    for a in amounts:
        await bucket.acquire(a)
    return len(amounts)


async def _concurrent(bucket, amounts):
    await asyncio.gather(*(bucket.acquire(a) for a in amounts))
    return len(amounts)


def acquire_all(loop, bucket, amounts, concurrent=False):
    """Runs bucket.acquire(a) for every amount, one after the other or all at once, on loop."""
    coro = _concurrent(bucket, amounts) if concurrent else _sequential(bucket, amounts)
    return loop.run_until_complete(coro)
'''

_os = subject.module("os")
_sys = subject.module("sys")
_pathlib = subject.module("pathlib")
_tempfile = subject.module("tempfile")
_importlib = subject.module("importlib")
_builtins = subject.module("builtins")


def install():
    """Writes the module into a fresh directory of the subject's /tmp (once per subject) and
    returns a module proxy for it."""
    if not any(isinstance(p, str) and p.endswith("-infradev-rl") for p in _sys.path):
        d = _tempfile.mkdtemp(suffix="-infradev-rl")
        _pathlib.Path(d + "/" + MODULE + ".py").write_text(SOURCE)
        # sys.path as a handle: read by value it would be a copy
        subject.keep(_builtins.getattr, _sys, "path").insert(0, d)
        _importlib.invalidate_caches()
    return subject.module(MODULE)
