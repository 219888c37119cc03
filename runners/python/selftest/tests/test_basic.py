import sys

import pytest


def test_pass():
    assert 1 + 1 == 2


def test_assert_fails():
    assert 3 == 4


def test_attribute_error():
    import os
    os.nope


@pytest.mark.skip(reason="not today")
def test_skipped():
    pass


def test_skip_in_body():
    pytest.skip("skipped from the body")


@pytest.fixture
def broken_fixture():
    raise ValueError("fixture setup broke")


def test_fixture_error(broken_fixture):
    pass


@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")


def test_teardown_error(broken_teardown):
    pass


def test_system_exit():
    sys.exit(3)


def test_keyboard_interrupt():
    raise KeyboardInterrupt


def test_pytest_exit():
    pytest.exit("leaving early", returncode=0)


def test_after_aborts():
    # Proves the session went on after KeyboardInterrupt / pytest.exit in earlier tests.
    pass
