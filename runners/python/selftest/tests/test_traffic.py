"""Collective counting against a fake torch.distributed (imported by a fixture, so that the
tests in test_budgets.py run without any torch at all)."""
import os
import sys

import pytest

FAKE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_torch")


@pytest.fixture
def dist():
    sys.path.insert(0, FAKE)
    try:
        import torch
        import torch.distributed as dist
        yield torch, dist
    finally:
        sys.path.remove(FAKE)
        for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
            del sys.modules[name]


def test_traffic_within_budget(dist):
    torch, d = dist
    assert hasattr(d.all_reduce, "__wrapped__")  # wrapped while the test runs
    t = torch.zeros(1000)  # 4000 bytes
    d.all_reduce(t)
    d.distributed_c10d.broadcast(t, 0)
    d.barrier()  # 1 call, 0 bytes (its inner all_reduce is not counted again)
    d.all_gather_object([None, None], {"x": 1})  # 1 all_gather of 8 bytes


def test_traffic_over_calls(dist):
    torch, d = dist
    for _ in range(5):
        d.all_reduce(torch.zeros(10))


def test_traffic_over_bytes(dist):
    torch, d = dist
    out = torch.zeros(4 * 1024 * 1024)
    d.all_gather_into_tensor(out, input_tensor=torch.zeros(1024 * 1024))  # 4 MiB sent
    d.send(torch.zeros(1024), 1)


def test_wrappers_removed_after_test(dist):
    torch, d = dist
    assert not hasattr(d.all_reduce, "__wrapped__")
