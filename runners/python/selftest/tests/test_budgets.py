import time

import pytest


def test_memory_over_budget():
    data = [0] * 7_000_000  # a 56 MB list against a 10 MB budget
    assert len(data) == 7_000_000


def test_memory_within_budget():
    data = bytes(1_000_000)
    assert len(data) == 1_000_000


def test_time_over_budget():
    # Budget 0.2 s: ends after 0.5 s, before the 2 * 0.2 + 1 s interrupt.
    time.sleep(0.5)


def test_time_interrupted():
    # Budget 0.3 s: interrupted at min(2 * 0.3 + 1, test_timeout_s) = 1.6 s.
    time.sleep(30)


def test_busy_loop_timeout():
    # No budget: interrupted by test_timeout_s (2 s).
    while True:
        pass


def test_timeout_swallowed():
    # Swallows the first TestTimeout; the alarm fires again a second later and still ends it.
    while True:
        try:
            while True:
                pass
        except Exception:
            pass


@pytest.fixture
def slow_fixture():
    time.sleep(30)


def test_setup_timeout(slow_fixture):
    pass


def test_traffic_budget_without_torch():
    # A traffic budget is declared, but torch is not importable: it cannot be measured.
    pass
