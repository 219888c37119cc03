raise KeyError("boom at import")


def test_never_runs():
    pass
