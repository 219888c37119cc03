"""Checkpoint directories in the subject's file system (not a probe itself).

The submission runs in the subject sandbox, whose /tmp the judge cannot see: every directory a
probe creates, inspects or removes is made there through the probe library. Paths are plain
absolute POSIX strings, so joining and normalising them is done here."""
# INFRADEV-PROBE-CANARY-81ddec5a5d69

import posixpath

from infradev_probe import subject

remote_os = subject.module("os")
remote_path = subject.module("os.path")
remote_tempfile = subject.module("tempfile")
remote_shutil = subject.module("shutil")
remote_pathlib = subject.module("pathlib")

join = posixpath.join


def norm(path):
    """The normalised form of an absolute path (what os.path.abspath gives in any process)."""
    assert isinstance(path, str) and path.startswith("/"), path
    return posixpath.normpath(path)


def make_root(prefix):
    """A fresh, empty directory in the subject (under its TMPDIR)."""
    root = remote_tempfile.mkdtemp(prefix=prefix)
    return norm(root)


def remove_root(root):
    remote_shutil.rmtree(root, ignore_errors=True)


def write_ckpt(root, step):
    """global_step_<step>/model.pt under ``root``, as a finished save leaves it."""
    path = join(root, f"global_step_{step}")
    remote_os.makedirs(path, exist_ok=True)
    remote_pathlib.Path(join(path, "model.pt")).write_text(f"weights of step {step}")
    return path


def complete_many(paths, name="model.pt"):
    """For each checkpoint directory, whether ``<dir>/<name>`` is a file (one round trip)."""
    paths = list(paths)
    if not paths:
        return []
    isfile = remote_path.isfile
    with subject.batch() as b:
        for p in paths:
            b.call(isfile, join(p, name))
    return [v is True for v in b.results]


def complete(path, name="model.pt"):
    return remote_path.isfile(join(path, name)) is True


def exists(path):
    return remote_path.exists(path) is True
