"""The subject runs the submission the way the probes' own process used to: under pytest (not
a probe itself).

Until the probe phase split into a judge and a subject, the submission was imported into the
pytest process that ran the probes, so it saw ``PYTEST_CURRENT_TEST`` (pytest sets it in
``os.environ`` around each test). The reference's ``verl.utils`` group-wise helpers resolve
``device=None`` through it: CPU under pytest, otherwise ``get_torch_device()``, a torch module
(``torch.cpu`` on a CPU-only machine) that ``Tensor.to(device=...)`` refuses. The subject is
not a pytest process, so this fixture sets the variable there for each test, with the value
pytest gives it, and restores it afterwards: the submission runs in the same conditions as the
official tests and the probes it was validated with."""
# INFRADEV-PROBE-CANARY-90e2a2fce621

import pytest
from infradev_probe import subject

NAME = "PYTEST_CURRENT_TEST"


@pytest.fixture(autouse=True)
def subject_under_pytest(request):
    environ = subject.getattr(subject.module("os"), "environ")
    generation = subject.generation
    before = environ.get(NAME)
    environ[NAME] = f"{request.node.nodeid} (call)"
    yield
    if subject.generation != generation:  # a replaced subject starts with its own environment
        return
    if before is None:
        environ.pop(NAME, None)
    else:
        environ[NAME] = before
