"""A stand-in for torch, just enough for the plugin's collective counting (selftest only)."""
from . import distributed  # noqa: F401


class Tensor:
    def __init__(self, numel, element_size=4):
        self._numel = numel
        self._element_size = element_size

    def numel(self):
        return self._numel

    def element_size(self):
        return self._element_size


def zeros(numel, element_size=4):
    return Tensor(numel, element_size)
