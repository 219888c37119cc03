import pytest

from minicache import BlockAllocator, NoFreeBlocksError


def test_allocate_assigns_enough_blocks():
    alloc = BlockAllocator(num_blocks=8, block_size=4)
    table = alloc.allocate(0, list(range(8)))
    assert table == [0, 1]
    assert alloc.get_block_table(0) == [0, 1]
    assert alloc.num_tokens(0) == 8
    assert alloc.num_free_blocks() == 6


def test_allocate_rounds_partial_block_up():
    alloc = BlockAllocator(num_blocks=8, block_size=4)
    assert len(alloc.allocate(0, list(range(9)))) == 3
    assert alloc.num_free_blocks() == 5


def test_append_fills_last_block_first():
    alloc = BlockAllocator(num_blocks=8, block_size=4)
    alloc.allocate(0, [1, 2, 3])
    assert alloc.append_tokens(0, [4]) == []
    assert alloc.num_free_blocks() == 7
    new = alloc.append_tokens(0, [5, 6, 7, 8, 9])
    assert len(new) == 2
    assert alloc.get_block_table(0)[1:] == new
    assert alloc.num_tokens(0) == 9


def test_free_returns_all_blocks():
    alloc = BlockAllocator(num_blocks=8, block_size=4)
    alloc.allocate(0, list(range(10)))
    alloc.allocate(1, list(range(100, 105)))
    alloc.free(0)
    alloc.free(1)
    assert alloc.num_free_blocks() == 8
    with pytest.raises(KeyError):
        alloc.get_block_table(0)


def test_out_of_blocks_is_atomic():
    alloc = BlockAllocator(num_blocks=4, block_size=4)
    alloc.allocate(0, list(range(12)))
    with pytest.raises(NoFreeBlocksError):
        alloc.allocate(1, list(range(100, 108)))
    assert alloc.num_free_blocks() == 1
    with pytest.raises(KeyError):
        alloc.get_block_table(1)
    with pytest.raises(NoFreeBlocksError):
        alloc.append_tokens(0, list(range(12, 20)))
    assert alloc.num_tokens(0) == 12
    assert alloc.num_free_blocks() == 1


def test_can_allocate():
    alloc = BlockAllocator(num_blocks=2, block_size=16)
    assert alloc.can_allocate(32)
    assert not alloc.can_allocate(33)


def test_duplicate_and_unknown_sequences_rejected():
    alloc = BlockAllocator(num_blocks=4, block_size=4)
    alloc.allocate(0, [1])
    with pytest.raises(ValueError):
        alloc.allocate(0, [2])
    with pytest.raises(KeyError):
        alloc.free(7)
    with pytest.raises(KeyError):
        alloc.append_tokens(7, [1])


def test_invalid_arguments():
    with pytest.raises(ValueError):
        BlockAllocator(num_blocks=0)
    with pytest.raises(ValueError):
        BlockAllocator(num_blocks=4, block_size=0)
    with pytest.raises(ValueError):
        BlockAllocator(num_blocks=4).allocate(0, [])
