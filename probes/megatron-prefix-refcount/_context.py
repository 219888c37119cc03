"""What this task's probes share: the stand-in for the DynamicInferenceContext attributes the
allocator reads, built in the subject, and the library idioms every probe file uses.

The upstream modules stay named in each probe file (`subject.module(...)`), where
`infradev tasks lint` reads every symbol a probe reaches."""

import torch

from infradev_probe import subject

# The subject's own standard library: the fake context lives where the allocator does.
_types = subject.module("types")
_builtins = subject.module("builtins")


def import_now(*modules):
    """Imports the modules in the subject at collection, outside every test, so that no
    test's measurement includes an import. Tests reach every name through the module proxies,
    which re-import in a new subject after a crash: a handle kept from an earlier subject
    would be stale."""
    for module in (*modules, _types):
        try:
            subject.describe(module)
        except Exception:
            pass  # the tests meet the error again and report it


def fake_context(requests=4, clock=0):
    """The attributes of DynamicInferenceContext that the allocator reads, for `requests`
    request slots, as a SimpleNamespace in the subject."""
    return _types.SimpleNamespace(
        paused_request_count=0,
        total_request_count=0,
        request_kv_block_counts=torch.zeros(requests, dtype=torch.int32),
        request_to_kv_block_ids=-torch.ones((requests, requests), dtype=torch.int32),
        prefix_cache_lru_clock=clock,
    )


def kept(obj, name):
    """``obj.<name>`` as a handle to the subject's own object (a tensor to update in place:
    read by value, it would be a copy)."""
    return subject.keep(_builtins.getattr, obj, name)
