"""Independent executable model of the documented LRU offloading semantics (written for the
probes from prompt.md, not derived from upstream code)."""
# INFRADEV-PROBE-CANARY-dbb67ff107ab


class ModelManager:
    """Tracks hash -> [ref_cnt, block_id] in recency order (a plain list, oldest first),
    and a CPU id pool: never-used ids in increasing order first, then freed ids LIFO."""

    def __init__(self, num_blocks, block_size, events=True):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.order = []  # oldest first
        self.state = {}  # hash -> [ref_cnt, block_id]
        self.next_fresh = 0
        self.freed = []
        self.events = [] if events else None

    # --- backend ---------------------------------------------------------------------
    def num_free(self):
        return self.num_blocks - self.next_fresh + len(self.freed)

    def _alloc_id(self):
        if self.next_fresh < self.num_blocks:
            self.next_fresh += 1
            return self.next_fresh - 1
        return self.freed.pop()

    # --- manager ---------------------------------------------------------------------
    def lookup(self, hashes):
        n = 0
        for h in hashes:
            st = self.state.get(h)
            if st is None or st[0] < 0:
                break
            n += 1
        return n

    def prepare_load(self, hashes):
        ids = []
        for h in hashes:
            st = self.state[h]
            assert st[0] >= 0
            st[0] += 1
            ids.append(st[1])
        return ids

    def complete_load(self, hashes):
        for h in hashes:
            self.state[h][0] -= 1

    def touch(self, hashes):
        for h in reversed(list(hashes)):
            if h in self.state:
                self.order.remove(h)
                self.order.append(h)

    def prepare_store(self, hashes):
        hashes = list(hashes)
        named = set(hashes)  # a block the call names is never evicted by it
        new = [h for h in hashes if h not in self.state]
        need = len(new) - self.num_free()
        evict = []
        if need > 0:
            for h in self.order:
                if self.state[h][0] == 0 and h not in named:
                    evict.append(h)
                    if len(evict) == need:
                        break
            if len(evict) < need:
                return None
        for h in evict:
            self.order.remove(h)
            self.freed.append(self.state.pop(h)[1])
        if evict and self.events is not None:
            self.events.append((True, list(evict)))
        ids = []
        for h in new:
            bid = self._alloc_id()
            self.state[h] = [-1, bid]
            self.order.append(h)
            ids.append(bid)
        return new, ids, evict

    def complete_store(self, hashes, success=True):
        stored = []
        for h in hashes:
            st = self.state[h]
            if st[0] >= 0:
                continue
            if success:
                st[0] = 0
                stored.append(h)
            else:
                self.freed.append(st[1])
                del self.state[h]
                self.order.remove(h)
        if stored and self.events is not None:
            self.events.append((False, stored))

    def take_events(self):
        if self.events is None:
            return []
        out, self.events = self.events, []
        return out

    def ready(self):
        return {h for h, st in self.state.items() if st[0] >= 0}
