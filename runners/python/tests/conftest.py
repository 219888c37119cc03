"""Fixtures for the probe protocol's Python side: the wire codec, the subject server (a real
``python3 -I`` subprocess on a real Unix socket, with the test speaking the broker's side by
hand-written frames) and the judge library (against a socketpair)."""

import os
import socket
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.dirname(HERE)
SUBJECT_DIR = os.path.join(LIB, "subject")
SERVER = os.path.join(SUBJECT_DIR, "infradev_subject.py")

if SUBJECT_DIR not in sys.path:
    sys.path.insert(0, SUBJECT_DIR)
if LIB not in sys.path:
    sys.path.insert(0, LIB)

import infradev_wire as wire  # noqa: E402

SECRET = "PROBE-SECRET-do-not-leak-0c1f"


def need_numpy():
    """numpy, or a skip; under CI=true a missing numpy fails the test instead."""
    if os.environ.get("CI") == "true":
        import numpy

        return numpy
    return pytest.importorskip("numpy")


def need_torch():
    """torch, or a skip: the host's Debian Python has none. runners/test.sh runs the wire tests
    again inside the torch layer image with INFRADEV_REQUIRE_TORCH=1, where a missing torch
    fails the test instead."""
    if os.environ.get("INFRADEV_REQUIRE_TORCH") == "1":
        import torch

        return torch
    return pytest.importorskip("torch")


# A small package for the subject to import.
SUBMISSION = {
    "subjpkg/__init__.py": """
        from .core import Counter, CounterError, Secretive, make_pair, add, hooks
        __version__ = "1.2.3"
    """,
    "subjpkg/core.py": '''
        import os, sys

        class CounterError(RuntimeError):
            """Raised by Counter."""

        class SubError(CounterError, KeyError):
            pass

        class Counter:
            def __init__(self, start=0, *, step=1):
                self.value = start
                self.step = step
                self.items = []

            def bump(self, n=1):
                self.value += n * self.step
                return self.value

            def fail(self, kind):
                if kind == "key":
                    raise KeyError("missing")
                if kind == "sub":
                    raise SubError("sub")
                if kind == "counter":
                    raise CounterError("counter")
                if kind == "exit":
                    raise SystemExit(3)
                raise ValueError(kind)

            def apply(self, fn, *args, **kwargs):
                return fn(*args, **kwargs)

            def noisy(self):
                print("x" * 100000)
                sys.stdout.flush()
                os.write(1, b"raw stdout bytes\\n")
                os.write(2, b"raw stderr bytes\\n")
                return "quiet"

            def __len__(self):
                return self.value

            def __getitem__(self, i):
                return self.items[i]

        class Secretive(Exception):
            def __init__(self, secret):
                super().__init__(secret)
                self.secret = secret

            def __str__(self):
                return self.secret

            def __repr__(self):
                return self.secret

        def raise_secret(secret):
            cls = type(secret.replace("-", "_"), (Secretive,), {})
            raise cls(secret)

        def make_pair():
            return (1, object())

        def add(a, b=2, *rest, c, d=None, **kw):
            return a + b

        def call_in_thread(fn):
            import threading
            out = []
            def run():
                try:
                    fn()
                except Exception as e:
                    out.append(type(e).__name__)
            t = threading.Thread(target=run)
            t.start()
            t.join()
            return out[0] if out else None

        hooks = []
    ''',
}


def make_repo(root):
    for rel, text in SUBMISSION.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text).lstrip())
    return root


class SubjectConn:
    """The test's side of the subject socket: it plays the broker with hand-written frames.
    Every frame the subject sends is kept (``received``) for leak checks."""

    def __init__(self, conn, proc):
        self.conn = conn
        self.proc = proc
        self.reader = wire.FrameReader(conn)
        self.received = []
        self.next_id = 1
        self.hello = self.read()

    def send(self, obj):
        self.conn.sendall(wire.pack(obj))

    def read(self):
        msg = self.reader.read()
        self.received.append(wire.dumps(msg) if msg is not None else b"")
        return msg

    def request(self, req):
        """Sends one request; returns the first frame the subject answers with."""
        n = self.next_id
        self.next_id += 1
        self.send({"id": n, "req": req})
        msg = self.read()
        assert msg is not None, "the subject hung up"
        assert msg["id"] == n
        return msg

    def ok(self, req):
        msg = self.request(req)
        assert "ok" in msg, msg
        return msg["ok"]

    def err(self, req):
        msg = self.request(req)
        assert "err" in msg, msg
        return msg["err"]

    def ref(self, req):
        v = self.ok(req)
        assert set(v) == {"$ref", "describe"}, v
        return v["$ref"]

    def close(self):
        self.reader.close()
        try:
            self.conn.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def repo(tmp_path):
    return make_repo(str(tmp_path / "repo"))


@pytest.fixture
def start_subject(tmp_path, repo):
    """Starts ``infradev_subject.py`` as the sandbox does (``python3 -I``), accepts its
    connection, welcomes it, and returns the connection."""
    started = []

    def start(extra_env=None, welcome=True):
        path = str(tmp_path / ("s%d.sock" % len(started)))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(30)
        env = {"INFRADEV_BROKER": path, "INFRADEV_REPO": repo, "PATH": "/usr/bin:/bin",
               "PYTHONPATH": "/nonexistent-pythonpath-is-ignored"}
        env.update(extra_env or {})
        proc = subprocess.Popen([sys.executable, "-I", SERVER], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        conn, _ = listener.accept()
        conn.settimeout(30)
        listener.close()
        s = SubjectConn(conn, proc)
        started.append(s)
        if welcome:
            s.send({"op": "welcome", "generation": 1})
        return s

    yield start
    for s in started:
        s.close()
        for stream in (s.proc.stdout, s.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def subj(start_subject):
    return start_subject()
