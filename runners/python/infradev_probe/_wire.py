"""Loads the shared codec, ``runners/python/subject/infradev_wire.py`` (one file for both sides),
without putting the subject's directory on ``sys.path``."""

import importlib.util
import os
import sys


def _load():
    mod = sys.modules.get("infradev_wire")
    if mod is not None:
        return mod
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(os.path.dirname(here), "subject", "infradev_wire.py")
    if os.path.exists(path):
        spec = importlib.util.spec_from_file_location("infradev_wire", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["infradev_wire"] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules["infradev_wire"]
            raise
        return mod
    import infradev_wire  # installed next to the library some other way

    return infradev_wire


wire = _load()
