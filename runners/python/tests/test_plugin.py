"""infradev_probe.plugin in a real pytest run, against a scripted broker socket that records
the events and answers the few calls the probes make with hand-written frames."""

import os
import socket
import subprocess
import sys
import textwrap
import threading

from conftest import LIB, SECRET, wire

PROBES = {
    "conftest.py": "",
    "test_a.py": '''
        import pytest
        from infradev_probe import subject

        pkg = subject.module("pkg")

        def test_pass():
            assert pkg.answer == 42

        def test_remote_key_error():
            pkg.lookup("%(secret)s")

        def test_assert():
            assert pkg.answer == 41, "%(secret)s"

        def test_crash():
            pkg.boom()

        def test_local_value_error():
            raise ValueError("%(secret)s")

        def test_unlisted():
            import json
            raise json.JSONDecodeError("%(secret)s", "", 0)

        @pytest.mark.skip(reason="%(secret)s")
        def test_skip():
            pass

        def test_timeout():
            while True:
                pass

        def test_swallowed_timeout():
            while True:
                try:
                    while True:
                        pass
                except Exception:
                    pass

        @pytest.fixture
        def broken():
            raise RuntimeError("%(secret)s")

        def test_fixture(broken):
            pass

        def test_missing_fixture(nope):
            pass

        def test_deselected():
            pass
    ''' % {"secret": SECRET},
    "test_broken.py": "import no_such_module_%s\n" % SECRET.replace("-", "_"),
}


def run_probes(tmp_path, select):
    probes = tmp_path / "probes"
    probes.mkdir()
    for name, text in PROBES.items():
        (probes / name).write_text(textwrap.dedent(text))
    sock_path = str(tmp_path / "judge.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(1)
    listener.settimeout(60)
    frames = []
    events = []
    errors = []

    def broker():
        try:
            conn, _ = listener.accept()
            conn.settimeout(60)
            reader = wire.FrameReader(conn)
            gen = 1
            while True:
                msg = reader.read()
                if msg is None:
                    break
                frames.append(wire.dumps(msg))
                op = msg.get("op")
                if op == "hello":
                    conn.sendall(wire.pack({"op": "welcome", "generation": gen}))
                elif op == "event":
                    events.append(msg["event"])
                    if msg["event"]["event"] == "start":
                        conn.sendall(wire.pack({"op": "started", "nodeid": msg["event"]["nodeid"]}))
                elif op == "call":
                    req = msg["req"]
                    n = msg["id"]
                    if req["op"] == "import":
                        reply = {"id": n, "ok": {"$ref": 1, "describe": {
                            "kind": "module", "callable": False, "exception": False,
                            "builtin": None}}}
                    elif req["op"] == "getattr" and req["name"] == "answer":
                        reply = {"id": n, "ok": 42}
                    elif req["op"] == "getattr" and req["name"] == "lookup":
                        reply = {"id": n, "ok": {"$ref": 2, "describe": {
                            "kind": "function", "callable": True, "exception": False,
                            "builtin": None}}}
                    elif req["op"] == "call":
                        reply = {"id": n, "err": {"builtin": "KeyError", "classes": []}}
                    elif req["op"] == "release":
                        reply = {"id": n, "ok": None}
                    elif req["op"] != "getattr" or req["name"] != "boom":
                        reply = {"id": n, "err": {"builtin": "AttributeError", "classes": []}}
                    else:  # boom: the subject dies
                        gen += 1
                        reply = {"id": n, "fault": "crashed", "generation": gen}
                    conn.sendall(wire.pack(reply))
            conn.close()
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=broker, daemon=True)
    t.start()
    env = dict(os.environ)
    env.update({
        "INFRADEV_BROKER": sock_path,
        "INFRADEV_TEST_TIMEOUT_S": "0.5",
        "INFRADEV_SELECT": wire.dumps(select).decode(),
        "PYTHONPATH": LIB,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    })
    env.pop("INFRADEV_SPEC", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "infradev_probe.plugin", "-p", "no:cacheprovider",
         "-q", "--rootdir", str(probes), "-c", os.path.join(LIB, "pytest.ini"),
         "test_a.py", "test_broken.py"],
        cwd=str(probes), env=env, capture_output=True, text=True, timeout=120)
    t.join(timeout=30)
    listener.close()
    assert not errors, errors
    return proc, events, frames


def test_events(tmp_path):
    select = ["test_a.py::" + n for n in (
        "test_pass", "test_remote_key_error", "test_assert", "test_crash",
        "test_local_value_error", "test_unlisted", "test_skip", "test_timeout",
        "test_swallowed_timeout", "test_fixture", "test_missing_fixture")]
    proc, events, frames = run_probes(tmp_path, select)
    out = proc.stdout + proc.stderr
    assert events[0] == {"event": "session_start"}
    assert events[-1] == {"event": "finish", "exitstatus": 1}, out
    assert {"event": "collect_error", "path": "test_broken.py",
            "exc_type": "ModuleNotFoundError"} in events
    results = {e["nodeid"].split("::")[1]: (e["when"], e["outcome"], e["exc_type"])
               for e in events if e["event"] == "result"}
    assert results == {
        "test_pass": ("call", "passed", None),
        "test_remote_key_error": ("call", "failed", "KeyError"),
        "test_assert": ("call", "failed", "AssertionError"),
        "test_crash": ("call", "failed", "infradev.SubjectCrashed"),
        "test_local_value_error": ("call", "failed", "ValueError"),
        "test_unlisted": ("call", "failed", "ValueError"),  # JSONDecodeError: its listed base
        "test_skip": ("setup", "skipped", "infradev.Skipped"),
        "test_timeout": ("call", "failed", "infradev.TestTimeout"),
        "test_swallowed_timeout": ("call", "failed", "infradev.TestTimeout"),
        "test_fixture": ("setup", "failed", "RuntimeError"),
        "test_missing_fixture": ("setup", "failed", "infradev.FixtureError"),
    }, out
    # every test is announced before its result, and waited for
    order = [(e["event"], e.get("nodeid")) for e in events if e["event"] in ("start", "result")]
    for i in range(0, len(order), 2):
        assert order[i][0] == "start" and order[i + 1] == ("result", order[i][1])
    # nothing but the schema's fields; no text from anywhere
    for e in events:
        assert "message" not in e
    sent = [f for f in frames if f.startswith(b'{"op":"event"')]
    assert len(sent) == len(events)
    assert not any(SECRET.encode() in f for f in sent)
    assert not any(SECRET.replace("-", "_").encode() in f for f in sent)
