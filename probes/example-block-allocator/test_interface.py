"""Structural probe: the public interface named in the task prompt exists, with the
documented signatures and exception types."""
# INFRADEV-PROBE-CANARY-9f2c4e7a1b

import pytest

from infradev_probe import subject

PROBE_SECRET = "PROBE-SECRET-interface-e0b5a317"

minicache = subject.module("minicache")
block_allocator = subject.module("minicache.block_allocator")


def test_public_interface():
    """Requirement: `minicache` and `minicache.block_allocator` export BlockAllocator and
    NoFreeBlocksError (a RuntimeError); BlockAllocator(num_blocks, block_size=16) has
    allocate(seq_id, token_ids), append_tokens(seq_id, token_ids), free(seq_id),
    num_free_blocks(), get_block_table(seq_id), num_tokens(seq_id), num_cached_tokens(seq_id)
    and ref_count(block_id), all callable with keyword arguments; ref_count raises ValueError
    for an out-of-range id and num_cached_tokens raises KeyError for an unknown sequence.

    The official tests call everything positionally and never check the error raised by
    num_cached_tokens, so renamed parameters or a different exception slip through."""
    # Identity is decided by handles (the judge decides on data only: `==` on two handles
    # would ask the subject's own __eq__): one subject object has one handle while the judge
    # holds it, and, for the exception class, one local stand-in class.
    assert minicache.BlockAllocator is block_allocator.BlockAllocator
    assert minicache.NoFreeBlocksError is block_allocator.NoFreeBlocksError
    assert subject.describe(minicache.NoFreeBlocksError)["exception"]
    assert issubclass(minicache.NoFreeBlocksError, RuntimeError)

    BlockAllocator = minicache.BlockAllocator
    params = subject.signature(BlockAllocator).parameters
    assert list(params)[:2] == ["num_blocks", "block_size"]
    assert params["block_size"].default == 16

    alloc = BlockAllocator(num_blocks=4)
    assert alloc.block_size == 16 and alloc.num_blocks == 4
    table = alloc.allocate(seq_id=1, token_ids=list(range(20)))
    assert table == alloc.get_block_table(seq_id=1) and len(table) == 2
    assert alloc.append_tokens(seq_id=1, token_ids=[7]) == []
    assert alloc.num_tokens(seq_id=1) == 21
    assert alloc.num_cached_tokens(seq_id=1) == 0
    assert alloc.ref_count(block_id=table[0]) == 1
    assert alloc.num_free_blocks() == 2
    with pytest.raises(ValueError):
        alloc.ref_count(-1)
    with pytest.raises(ValueError):
        alloc.ref_count(4)
    with pytest.raises(KeyError):
        alloc.num_cached_tokens(99)
    alloc.free(seq_id=1)
    assert alloc.num_free_blocks() == 4
    # The documented exception really is raised, and is a RuntimeError.
    with pytest.raises(minicache.NoFreeBlocksError):
        alloc.allocate(seq_id=2, token_ids=list(range(65)))
    with pytest.raises(RuntimeError):
        alloc.allocate(seq_id=3, token_ids=list(range(65)))
