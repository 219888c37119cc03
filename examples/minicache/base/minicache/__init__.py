"""minicache: a paged KV-cache block allocator."""

from .block_allocator import BlockAllocator, NoFreeBlocksError

__all__ = ["BlockAllocator", "NoFreeBlocksError"]
__version__ = "0.1.0"
