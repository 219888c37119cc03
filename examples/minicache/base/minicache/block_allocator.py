"""Paged KV-cache block allocator.

The KV cache is split into ``num_blocks`` fixed-size blocks of ``block_size``
token slots. Each sequence owns a *block table*: the ordered list of block ids
holding its tokens. A sequence of ``n`` tokens needs ``ceil(n / block_size)``
blocks, and only its last block may be partially filled.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Sequence


class NoFreeBlocksError(RuntimeError):
    """Raised when a request needs more blocks than the allocator has free."""


@dataclass
class _SeqState:
    block_table: List[int] = field(default_factory=list)
    num_tokens: int = 0


class BlockAllocator:
    """Hands out fixed-size KV-cache blocks to sequences."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Never-used blocks are handed out in increasing id order.
        self._free: Deque[int] = deque(range(num_blocks))
        self._seqs: Dict[int, _SeqState] = {}

    # -- queries ----------------------------------------------------------

    def num_free_blocks(self) -> int:
        """Number of blocks that can be handed out right now."""
        return len(self._free)

    def blocks_needed(self, num_tokens: int) -> int:
        """Number of blocks that hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    def can_allocate(self, num_tokens: int) -> bool:
        """Whether a new sequence of ``num_tokens`` tokens would fit now."""
        return self.blocks_needed(num_tokens) <= self.num_free_blocks()

    def get_block_table(self, seq_id: int) -> List[int]:
        """A copy of the block table of ``seq_id``; KeyError if unknown."""
        return list(self._get(seq_id).block_table)

    def num_tokens(self, seq_id: int) -> int:
        """Number of tokens held by ``seq_id``; KeyError if unknown."""
        return self._get(seq_id).num_tokens

    # -- mutations --------------------------------------------------------

    def allocate(self, seq_id: int, token_ids: Sequence[int]) -> List[int]:
        """Allocate blocks for a new sequence and return its block table."""
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id} is already allocated")
        if len(token_ids) == 0:
            raise ValueError("cannot allocate a sequence without tokens")
        needed = self.blocks_needed(len(token_ids))
        self._reserve(needed)
        state = _SeqState([self._free.popleft() for _ in range(needed)], len(token_ids))
        self._seqs[seq_id] = state
        return list(state.block_table)

    def append_tokens(self, seq_id: int, token_ids: Sequence[int]) -> List[int]:
        """Append tokens to ``seq_id``; return the ids of newly added blocks."""
        state = self._get(seq_id)
        total = state.num_tokens + len(token_ids)
        needed = self.blocks_needed(total) - len(state.block_table)
        self._reserve(needed)
        new_blocks = [self._free.popleft() for _ in range(needed)]
        state.block_table.extend(new_blocks)
        state.num_tokens = total
        return new_blocks

    def free(self, seq_id: int) -> None:
        """Release every block of ``seq_id``; KeyError if unknown."""
        state = self._seqs.pop(seq_id)
        self._free.extend(state.block_table)

    # -- helpers ----------------------------------------------------------

    def _get(self, seq_id: int) -> _SeqState:
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise KeyError(f"unknown sequence {seq_id}") from None

    def _reserve(self, needed: int) -> None:
        available = self.num_free_blocks()
        if needed > available:
            raise NoFreeBlocksError(f"need {needed} blocks, only {available} free")
