"""A judge-side model of the ring buffer's documented placement and free rules (prompt.md).
Plain Python: the judge never imports the subject's code."""


class RingModel:
    """Live chunks oldest first, each (id, offset, total) with total = size + MD_SIZE and
    offset in [0, N). The next chunk goes right after the newest live chunk, or at offset 0
    when it does not fit before the buffer's end; it must never reach the oldest live chunk.
    With no live chunk the next one starts at offset 0."""

    def __init__(self, n, md_size):
        self.n = n
        self.md = md_size
        self.live = []  # [(id, offset, total)], oldest first

    def place(self, size):
        """The offset of a chunk of `size` data bytes, or None when it cannot fit."""
        total = size + self.md
        if total > self.n:
            return None
        if not self.live:
            return 0
        head = self.live[0][1]
        _, off, tot = self.live[-1]
        tail = off + tot
        if head < tail:
            # the live region does not wrap: [head, tail)
            if tail + total <= self.n:
                return tail
            return 0 if total <= head else None
        # wrapped: the free gap is [tail, head)
        return tail if tail + total <= head else None

    def add(self, mid, offset, size):
        self.live.append((mid, offset, size + self.md))

    def free(self, is_free, nbytes=None):
        """The ids free_buf frees: oldest first while is_free(id) and fewer than nbytes freed."""
        if nbytes is None:
            nbytes = self.n
        freed, out = 0, []
        while self.live and freed < nbytes:
            mid, _, tot = self.live[0]
            if not is_free(mid):
                break
            self.live.pop(0)
            out.append(mid)
            freed += tot
        return out

    def overlaps(self, offset, size):
        lo, hi = offset, offset + size + self.md
        return [mid for mid, o, t in self.live if lo < o + t and o < hi]
