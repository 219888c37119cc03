"""workload_seed: fixed per name, moved by INFRADEV_PROBE_SEED, loud on a bad value."""

import zlib

import pytest

from infradev_probe import workload_seed


@pytest.mark.parametrize(
    "env, offset",
    [(None, 0), ("0", 0), ("1", 1), ("7", 7)],
)
def test_the_seed_is_the_names_crc_plus_the_environments_offset(monkeypatch, env, offset):
    if env is None:
        monkeypatch.delenv("INFRADEV_PROBE_SEED", raising=False)
    else:
        monkeypatch.setenv("INFRADEV_PROBE_SEED", env)
    assert workload_seed("PROBE-SECRET-x") == zlib.crc32(b"PROBE-SECRET-x") + offset
    assert workload_seed("PROBE-SECRET-x") != workload_seed("PROBE-SECRET-y")


def test_a_seed_that_is_not_an_integer_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("INFRADEV_PROBE_SEED", "one")
    with pytest.raises(ValueError, match="INFRADEV_PROBE_SEED='one'"):
        workload_seed("PROBE-SECRET-x")


@pytest.mark.parametrize("name", ["", None, 3])
def test_a_seed_needs_a_name(name):
    with pytest.raises(ValueError):
        workload_seed(name)
