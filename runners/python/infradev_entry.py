"""Entry point of the pytest sandboxes (the official phase and the judge).

Started as ``python3 -I infradev_entry.py <pytest args>``: ``-I`` keeps ``PYTHONPATH`` and the
user site out of the interpreter, so nothing of the repository (a ``sitecustomize.py``, a
module shadowing the standard library) can run before this file. In the official phase it
imports pytest and every module of its own (and so everything they import at their top) from
the image, before anything of the repository is on ``sys.path``: a repository file named like
one of them (``iniconfig.py``, ``json.py``) cannot take their place. Then it tells the grader,
over ``INFRADEV_EVENTS_SOCKET``, that our side is up (the infra boundary: whatever goes wrong
after this frame is the submission's doing), and only then puts ``INFRADEV_SYSPATH`` (our
library, then the repository) on ``sys.path`` and runs pytest in this process. Standard library
only, besides pytest.
"""

import importlib
import json
import os
import pkgutil
import socket
import struct
import sys


def _send_ready(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    body = json.dumps({"event": "ready"}).encode()
    sock.sendall(struct.pack(">I", len(body)) + body)
    return sock


def _preload_pytest():
    """Imports pytest and all of ``_pytest`` from the image. A module that cannot be imported
    here (an optional one) is left to pytest, as it would be anyway."""
    import _pytest
    import pytest  # noqa: F401

    for info in pkgutil.walk_packages(_pytest.__path__, "_pytest.", onerror=lambda _name: None):
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - optional parts (a missing extra) stay unloaded
            pass


def main():
    try:
        _preload_pytest()
    except ImportError as e:
        sys.stderr.write("infradev_entry: pytest cannot be imported from the image: %s\n" % e)
        return 70  # EX_SOFTWARE: ours, before the repository is anywhere on sys.path
    events = os.environ.get("INFRADEV_EVENTS_SOCKET")
    channel = None
    if events:
        try:
            channel = _send_ready(events)
        except OSError as e:
            sys.stderr.write("infradev_entry: cannot reach the grader's events socket: %s\n" % e)
            return 70  # EX_SOFTWARE: ours, and the grader sees no ready
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [p for p in os.environ.get("INFRADEV_SYSPATH", here).split(":") if p]
    sys.path[:0] = paths
    import pytest  # noqa: E402  (loaded by _preload_pytest, from the image)

    code = pytest.main(sys.argv[1:])
    if channel is not None:
        channel.close()
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
