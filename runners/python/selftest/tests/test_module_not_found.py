import a_module_that_does_not_exist


def test_never_runs():
    pass
