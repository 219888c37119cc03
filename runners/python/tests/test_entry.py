"""The pytest sandboxes' entry: pytest and its own modules come from the image, whatever the
repository names its files. A repository that ships ``iniconfig.py``, ``pluggy.py``,
``difflib.py`` (pytest's lazily used diff helper) or a ``_pytest`` package at its root gets none
of them imported in their place."""

import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRY = os.path.join(os.path.dirname(HERE), "infradev_entry.py")

SHADOWS = ["iniconfig", "pluggy", "difflib", "pprint", "packaging"]


def test_repository_modules_never_replace_pytest_s(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    marker = tmp_path / "shadow-ran"
    for name in SHADOWS:
        (repo / (name + ".py")).write_text(
            "open(%r, 'a').write(%r)\nraise SystemExit(3)\n" % (str(marker), name + "\n")
        )
    (repo / "_pytest").mkdir()
    (repo / "_pytest" / "__init__.py").write_text(
        "open(%r, 'a').write('_pytest\\n')\nraise SystemExit(3)\n" % str(marker)
    )
    (repo / "test_it.py").write_text(
        textwrap.dedent(
            """
            def test_a_failing_comparison_still_fails():
                # Rendering this assertion's diff uses difflib and pprint.
                assert {"a": [1, 2, 3]} == {"a": [1, 2, 4]}
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFRADEV_")}
    env["INFRADEV_SYSPATH"] = "%s:%s" % (os.path.dirname(ENTRY), repo)
    out = subprocess.run(
        [sys.executable, "-I", ENTRY, "-q", "-p", "no:cacheprovider", "--rootdir", str(repo),
         str(repo / "test_it.py")],
        cwd=str(repo),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not marker.exists(), "a repository module ran: %s" % marker.read_text()
    assert out.returncode == 1, out.stdout + out.stderr  # the one test failed, honestly
    assert "1 failed" in out.stdout, out.stdout + out.stderr
