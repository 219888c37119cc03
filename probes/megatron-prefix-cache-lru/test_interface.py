"""Structural probe: the allocator methods and bookkeeping tensors that the prompt promises
exist with the documented parameter names, defaults, dtypes and devices, and work when
called with keyword arguments."""
# INFRADEV-PROBE-CANARY-1ae289764f0a

import pytest
import torch

from _context import fake_context, import_now, kept
from infradev_probe import subject

kv_block_allocator = subject.module("megatron.core.inference.contexts.kv_block_allocator")
config = subject.module("megatron.core.inference.config")
import_now(kv_block_allocator, config)


def test_public_interface():
    """Requirement: `register_kv_block_hashes(block_ids, block_hashes, parent_hashes=None)`,
    `is_memory_available(num_blocks, potential_matched_count=0)` and
    `evict_lru_blocks(num_blocks_needed)` keep these parameter names and defaults; LRU mode
    keeps `block_parent_id` / `block_child_count` as int64 CPU tensors of shape (total_count,)
    starting at -1 / 0; registering with `parent_hashes` of the wrong length raises
    AssertionError; `reset()` restores both tensors; `evict_lru_blocks(0)` returns True.

    The official tests call these positionally or check only some of the attributes."""
    KVBlockAllocator = kv_block_allocator.KVBlockAllocator
    PrefixCachingEvictionPolicy = config.PrefixCachingEvictionPolicy
    sig = subject.signature(KVBlockAllocator.register_kv_block_hashes)
    assert list(sig.parameters)[1:] == ["block_ids", "block_hashes", "parent_hashes"]
    assert sig.parameters["parent_hashes"].default is None
    sig = subject.signature(KVBlockAllocator.is_memory_available)
    assert list(sig.parameters)[1:] == ["num_blocks", "potential_matched_count"]
    assert sig.parameters["potential_matched_count"].default == 0
    sig = subject.signature(KVBlockAllocator.evict_lru_blocks)
    assert list(sig.parameters)[1:] == ["num_blocks_needed"]

    a = KVBlockAllocator(context=fake_context(clock=3), total_count=12, paused_count=2,
                         enable_prefix_caching=True,
                         prefix_caching_eviction_policy=PrefixCachingEvictionPolicy.LRU)
    for name, fill in (("block_parent_id", -1), ("block_child_count", 0)):
        # Tensors cross as CPU copies: device and dtype are asked of the subject's own tensor.
        remote = kept(a, name)
        assert remote.device.type == "cpu" and remote.dtype == torch.int64
        t = subject.fetch(remote)
        assert isinstance(t, torch.Tensor) and t.dtype == torch.int64
        assert tuple(t.shape) == (12,)
        assert (t == fill).all().item()

    ids = a.allocate_memory_blocks(num_blocks=4).clone().tolist()
    # Allocation pins the blocks (ref count 1) and stamps them with the context's clock.
    assert a.block_ref_counts[ids].tolist() == [1, 1, 1, 1]
    assert a.block_timestamps[ids].tolist() == [3, 3, 3, 3]
    a.register_kv_block_hashes(block_ids=ids[:2], block_hashes=[11, 12], parent_hashes=[0, 11])
    # A chunk whose first parent was registered by the previous call.
    a.register_kv_block_hashes(block_ids=ids[2:], block_hashes=[13, 14], parent_hashes=[12, 11])
    assert a.block_parent_id[ids].tolist() == [-1, ids[0], ids[1], ids[0]]
    assert a.block_child_count[ids].tolist() == [2, 1, 0, 0]
    # Without parent_hashes every block is a root.
    more = a.allocate_memory_blocks(num_blocks=1).clone().tolist()
    a.register_kv_block_hashes(block_ids=more, block_hashes=[15])
    assert a.block_parent_id[more].tolist() == [-1]
    other = KVBlockAllocator(context=fake_context(clock=3), total_count=6, paused_count=1,
                             enable_prefix_caching=True,
                             prefix_caching_eviction_policy=PrefixCachingEvictionPolicy.LRU)
    with pytest.raises(AssertionError):
        other.register_kv_block_hashes(block_ids=[1], block_hashes=[99], parent_hashes=[1, 2])

    a.release_memory_blocks(torch.tensor(ids + more, dtype=torch.int32))
    assert a.evict_lru_blocks(num_blocks_needed=0) is True
    assert a.is_memory_available(num_blocks=a.total_avail + 5, potential_matched_count=0) is True
    assert a.is_memory_available(num_blocks=a.total_avail + 5, potential_matched_count=1) is False
    assert a.evict_lru_blocks(num_blocks_needed=5) is True
    assert a.kv_hash_to_block_id == {}
    assert (a.block_child_count == 0).all().item()

    a.register_kv_block_hashes(block_ids=[0, 1], block_hashes=[21, 22], parent_hashes=[0, 21])
    a.reset()
    assert (a.block_parent_id == -1).all().item()
    assert (a.block_child_count == 0).all().item()
