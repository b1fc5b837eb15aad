"""Block prefix cache that reuses only full blocks (TensorRT-LLM's KV block reuse model).

Place in the map (docs/architecture.md, "The emulator"): the prefix cache of the ``trtllm`` profile.
A prompt is cut into blocks of ``block_tokens`` (32 by default); block *i* is identified by
its tokens and the identity of block *i-1*, so a block matches only when the whole prefix up
to it matches. Cached tokens are ``matched_full_blocks * block_tokens``; a trailing partial
block is never reused. When more than ``capacity_tokens // block_tokens`` blocks are stored,
unreferenced leaf blocks (no stored child) are evicted, least recently used first;
``on_evict`` hears the tokens up to each evicted block (the engine model's host tier keeps them).

**Sliding-window layers** (vLLM's hybrid KV cache manager; ``swa_groups`` > 0): a model whose
layers attend to the last ``swa_tokens`` tokens (Gemma 3: 512) beside full-attention ones keeps
one KV group of full-attention layers and ``swa_groups`` groups of sliding-window layers, each
group drawing blocks from the one pool (vLLM groups the layers by the pattern's minority type:
Gemma 3's 3 full and 15 sliding layers make 1 + 5 groups). A stored block then has a full part
(one pool block) and a sliding part in each sliding group (one pool block each); sizes and
capacities count pool blocks. A prefix of ``k`` blocks is a hit when its full parts are all
stored and the sliding parts (in every group) of its last ``ceil((swa_tokens - 1) /
block_tokens)`` blocks are (fewer from the start), found from the right as vLLM's
``SlidingWindowManager.find_longest_cache_hit`` does, and never the block of a prompt's last
token (vLLM computes at least one). vLLM (0.32, ``prefix_cache_retention_interval`` 0) hashes
sliding parts only where a later request can hit: the tail before a prompt's replay boundary
(its last token's block) and, when the full-attention blocks matched further than the hit, the
tail before that junction; every other sliding part is computed, held while in the window, and
goes back to the pool uncached (its free queue reuses unhashed blocks first). A request holds
the sliding parts from its hit's window to its end, all of them while it computes (vLLM
allocates every block past the hit anew, in every group, even where blocks of it are stored:
those copies stay in the pool where they were until evicted, ``admit``'s stale copies), and lets
go of those out of its window once computed. Cached sliding parts are
evicted one group's block at a time (vLLM's free queue knows no prefix order), oldest first,
beside full leaves; a full part evicted takes what is left of its sliding parts. Stamps follow
vLLM's free order for Gemma 3 (whose first layers slide, so its sliding groups come first): a
request's sliding parts, group after group, each group's tail first
(``SingleTypeKVCacheManager.free`` frees a group's blocks in reverse), then its full parts.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Sequence

from swarm.token_ids import TokenIds, as_token_ids

_ROOT = 0


class _Block:
    __slots__ = (
        "children",
        "key",
        "last_access",
        "lock",
        "parent",
        "swa",
        "swa_access",
        "swa_kept",
        "swa_lock",
    )

    def __init__(self, key: tuple[int, bytes], parent: int) -> None:
        self.key = key
        self.parent = parent
        self.children = 0
        self.last_access = 0
        self.lock = 0
        #: sliding groups that store this block (usable for a hit at all of them); the stamp its
        #: sliding parts were last freed from; requests holding them
        self.swa = 0
        self.swa_access = 0
        self.swa_lock = 0
        #: its sliding parts are hashed (a prompt's replay tail, or the tail before a junction):
        #: free, they stay cached; else they are only held while a request computes past them
        self.swa_kept = False


class Hold:
    """What ``lock`` returns and ``unlock`` takes: the blocks a request holds the full parts of,
    and the positions in ``chain`` of those it holds the sliding parts of (``trim`` lets go of
    those that leave its window)."""

    __slots__ = ("chain", "swa_at")

    def __init__(self, chain: list[int], swa_at: list[int]) -> None:
        self.chain = chain
        self.swa_at = swa_at


class BlockCache:
    """Prefix cache at block granularity. See the module docstring for the model."""

    #: the prompt enters on ``insert`` (a slot cache fills on ``lock``); tokens restored from a
    #: tier of its own (a slot cache's RAM prompt cache; none here)
    fills_on_lock = False
    loaded_tokens = 0

    def __init__(
        self,
        capacity_tokens: int | None = None,
        block_tokens: int = 32,
        *,
        swa_tokens: int = 0,
        swa_groups: int = 0,
        touch_on_match: bool = True,
    ) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        if swa_groups < 0 or swa_tokens < 0 or (swa_groups > 0) != (swa_tokens > 0):
            raise ValueError("swa_tokens and swa_groups are both > 0 (a sliding-window model) or both 0")
        self.block_tokens = block_tokens
        #: a lookup makes the blocks it matches the newest (else only a request's use does:
        #: vLLM's free queue moves a block when a request takes or frees it, never on a lookup)
        self.touch_on_match = touch_on_match
        self.swa_tokens = swa_tokens
        self.swa_groups = swa_groups
        #: blocks of sliding parts a hit needs at its end (vLLM: cdiv(sliding_window - 1, block_size))
        self.swa_hit_blocks = -(-(swa_tokens - 1) // block_tokens) if swa_groups else 0
        #: pool blocks of sliding parts stored (one per block and group)
        self.swa_count = 0
        #: evictable sliding parts: (stamp, block id, the block's ``swa_access`` then)
        self._swa_heap: list[tuple[int, int, int]] = []
        #: stale copies (``admit``): pool blocks of a prompt's stored blocks past its hit, which
        #: vLLM leaves cached where they were while it computes the blocks anew; by stamp
        self._stale: list[int] = []
        self.capacity_tokens = capacity_tokens
        self.capacity_blocks = None if capacity_tokens is None else capacity_tokens // block_tokens
        self._blocks: dict[int, _Block] = {}
        #: a block's id by its parent's and its tokens' bytes (8 a token id)
        self._ids: dict[tuple[int, bytes], int] = {}
        self._next_id = 1
        self._tick = 0
        self.evicted_tokens = 0
        # evictable leaf blocks by last access, with lazy deletion (see RadixCache's docstring)
        self._heap: list[tuple[int, int]] = []
        #: called with the tokens from the first block to each evicted one (a host tier keeps them)
        self.on_evict: Callable[[TokenIds], object] | None = None

    def _touch(self, bid: int) -> None:
        self._tick += 1
        block = self._blocks[bid]
        block.last_access = self._tick
        if block.children == 0:
            self._push(bid)

    def _push(self, bid: int) -> None:
        heapq.heappush(self._heap, (self._blocks[bid].last_access, bid))
        if len(self._heap) > 4 * len(self._blocks) + 64:
            self._heap = [e for e in self._heap if self._evictable(*e)]
            heapq.heapify(self._heap)

    def _evictable(self, stamp: int, bid: int) -> bool:
        block = self._blocks.get(bid)
        return block is not None and block.children == 0 and block.lock == 0 and block.last_access == stamp

    def _stamp_swa(self, bids: Sequence[int]) -> None:
        """The sliding parts of ``bids`` (in vLLM's free order, tail first) are stored in every
        group, and free in that order one group after another (each group's blocks in turn)."""
        if not bids:
            return
        base = self._tick + 1
        n = len(bids)
        groups = self.swa_groups
        heap = self._swa_heap
        for rank, bid in enumerate(bids):
            block = self._blocks[bid]
            self.swa_count += groups - block.swa
            block.swa = groups
            block.swa_access = base
            block.swa_kept = True
            if block.swa_lock == 0:
                for g in range(groups):
                    heapq.heappush(heap, (base + g * n + rank, bid, base))
        self._tick += groups * n
        if len(heap) > 4 * (len(self._blocks) + self.swa_count) + 64:
            self._swa_heap = [e for e in heap if self._swa_evictable(*e)]
            heapq.heapify(self._swa_heap)

    def _restamp_swa(self, bids: Sequence[int]) -> None:
        """Sliding parts stored (as many groups as each has) freed now, in ``bids``' order."""
        if not bids:
            return
        base = self._tick + 1
        n = len(bids)
        for rank, bid in enumerate(bids):
            block = self._blocks[bid]
            block.swa_access = base
            for g in range(block.swa):
                heapq.heappush(self._swa_heap, (base + g * n + rank, bid, base))
        self._tick += self.swa_groups * n

    def _drop_swa(self, block: _Block) -> None:
        """A block's sliding parts go back to the pool uncached (vLLM hashes none but a
        prompt's replay tail and a junction's: its free queue reuses the others first)."""
        self.swa_count -= block.swa
        block.swa = 0
        block.swa_kept = False

    def _swa_evictable(self, stamp: int, bid: int, base: int) -> bool:
        block = self._blocks.get(bid)
        return block is not None and block.swa > 0 and block.swa_lock == 0 and block.swa_access == base

    @property
    def size_blocks(self) -> int:
        """Pool blocks stored: a full part each, and a sliding part in each group that has it."""
        return len(self._blocks) + self.swa_count + len(self._stale)

    @property
    def size_tokens(self) -> int:
        return self.size_blocks * self.block_tokens

    def swa_window_start(self, n_tokens: int) -> int:
        """The first block whose sliding part a sequence of ``n_tokens`` computed still holds
        (vLLM frees the blocks wholly before token ``n - swa_tokens + 1``)."""
        return max(0, n_tokens - self.swa_tokens + 1) // self.block_tokens if self.swa_groups else 0

    def _chain(self, tokens: Sequence[object], *, hit: bool = True) -> list[int]:
        """Stored block ids matching the prompt's leading full blocks; with sliding-window
        layers and ``hit``, those of the longest hit (see the module docstring)."""
        out: list[int] = []
        parent = _ROOT
        b = self.block_tokens
        hit = hit and self.swa_groups > 0
        n_blocks = (len(tokens) - 1) // b if hit else len(tokens) // b
        if n_blocks <= 0:
            return self._swa_hit(out) if hit else out
        raw, width = as_token_ids(tokens)[: n_blocks * b].tobytes(), 8 * b
        ids = self._ids
        for at in range(0, n_blocks * width, width):
            bid = ids.get((parent, raw[at : at + width]))
            if bid is None:
                break
            out.append(bid)
            parent = bid
        return self._swa_hit(out) if hit else out

    def _swa_hit(self, chain: list[int]) -> list[int]:
        """The longest prefix of ``chain`` whose last ``swa_hit_blocks`` blocks (all of it, if
        shorter) have their sliding parts: searched from the right, as vLLM does."""
        need, groups = self.swa_hit_blocks, self.swa_groups
        run = 0
        for i in range(len(chain) - 1, -1, -1):
            block = self._blocks[chain[i]]
            if block.swa == groups and block.swa_kept:
                run += 1
                if run >= need:
                    return chain[: i + run]
            else:
                run = 0
        return chain[:run]

    def _tail(self, chain: list[int], boundary_blocks: int) -> list[int]:
        """The blocks of ``chain`` whose sliding parts a hit ending after ``boundary_blocks``
        blocks needs (the last ``swa_hit_blocks`` before it)."""
        end = min(boundary_blocks, len(chain))
        return chain[max(0, end - self.swa_hit_blocks) : end]

    def _replay_tail(self, chain: list[int], n_tokens: int) -> list[int]:
        """The blocks whose sliding parts vLLM hashes for a prompt of ``n_tokens``: the tail
        before its replay boundary (its last token's block start: where the same prompt, or
        a longer one, hits it)."""
        return self._tail(chain, (n_tokens - 1) // self.block_tokens)

    def _touch_swa(self, chain: list[int], n_tokens: int) -> None:
        """A prompt of ``n_tokens`` over ``chain`` was stored (or, ``match`` with
        ``touch_on_match``, used): the sliding parts of its replay tail are cached and the
        newest, tail first."""
        self._stamp_swa(self._replay_tail(chain, n_tokens)[::-1])

    def match(self, tokens: Sequence[object]) -> int:
        chain = self._chain(tokens)
        if not self.touch_on_match:
            return len(chain) * self.block_tokens
        if self.swa_groups:  # the sliding parts the hit used: the tail before it
            self._restamp_swa(self._tail(chain, len(chain))[::-1])
        for bid in chain:
            self._touch(bid)
        return len(chain) * self.block_tokens

    def peek(self, tokens: Sequence[object]) -> int | None:
        """``match`` without marking the matched blocks used; None with sliding-window layers
        (a match there marks the sliding parts it used: not modelled ahead)."""
        if self.swa_groups:
            return None
        return len(self._chain(tokens)) * self.block_tokens

    def lock(self, tokens: Sequence[object], hit_tokens: int = 0, junction_tokens: int = 0) -> Hold:
        """Hold the stored blocks of ``tokens`` until ``unlock``: with sliding-window layers
        their sliding parts too, from the window of the ``hit_tokens`` it found cached on (vLLM
        takes null blocks before it) to its end, in every group, while the request computes
        (``trim`` lets go of those out of its window as it goes). Parts past the hit that were
        evicted are the request's anew: it computes them into blocks of the pool."""
        chain = self._chain(tokens, hit=False)
        for bid in chain:
            self._blocks[bid].lock += 1
        if not self.swa_groups:
            return Hold(chain, [])
        swa_at = list(range(self.swa_window_start(hit_tokens), len(chain)))
        groups = self.swa_groups
        for i in swa_at:
            block = self._blocks[chain[i]]
            block.swa_lock += 1
            if block.swa < groups:
                self.swa_count += groups - block.swa
                block.swa = groups
        # a full-attention match longer than the hit (``junction_tokens``): vLLM keeps the
        # sliding tail before it too (its ``shared_prefix_boundary``), so the junction of a
        # shared prefix serves the next request
        if junction_tokens > hit_tokens:
            tail = set(self._tail(chain, junction_tokens // self.block_tokens))
            for i in swa_at:
                if chain[i] in tail:
                    self._blocks[chain[i]].swa_kept = True
        return Hold(chain, swa_at)

    def admit(self, tokens: Sequence[object], hit_tokens: int, replay_tokens: int | None = None) -> Hold:
        """A request is admitted on ``hit_tokens`` cached: store its prompt ``tokens`` (the
        sliding tail before the replay boundary of its first ``replay_tokens``, default all)
        and hold it (``lock``). With sliding-window layers, as vLLM: every block past the hit
        is computed anew, so the copies stored there stay in the pool, evictable where they
        were, until they go (stale copies; those another request holds are not counted); and
        a full-attention match longer than the hit pins the sliding tail before it."""
        if not self.swa_groups:
            self.insert(tokens)
            return self.lock(tokens, hit_tokens)
        stored = self._chain(tokens, hit=False)
        junction = min(len(stored), (len(tokens) - 1) // self.block_tokens) * self.block_tokens
        for bid in stored[hit_tokens // self.block_tokens :]:
            block = self._blocks[bid]
            if block.lock == 0:
                heapq.heappush(self._stale, block.last_access)
            if block.swa_lock == 0:
                for _ in range(block.swa if block.swa_kept else 0):
                    heapq.heappush(self._stale, block.swa_access)
        n = len(tokens) if replay_tokens is None else replay_tokens
        self.insert(tokens[:n])
        if n < len(tokens):
            self.insert(tokens, swa_tail=False)
        return self.lock(tokens, hit_tokens, junction)

    def trim(self, handle: Hold, computed_tokens: int) -> None:
        """A request has computed ``computed_tokens``: the sliding parts it holds out of its
        window are free now, the newest (vLLM's ``remove_skipped_blocks``, at the request's next
        step; tail first, group after group)."""
        start = self.swa_window_start(computed_tokens)
        if not handle.swa_at or handle.swa_at[0] >= start:
            return
        out = [i for i in handle.swa_at if i < start]
        handle.swa_at = handle.swa_at[len(out) :]
        freed = []
        for i in out:
            block = self._blocks.get(handle.chain[i])
            if block is not None:
                block.swa_lock -= 1
                if block.swa_lock == 0 and block.swa > 0:
                    if block.swa_kept:
                        freed.append(handle.chain[i])
                    else:
                        self._drop_swa(block)
        self._restamp_swa(freed[::-1])

    def unlocked_tokens(self, tokens: Sequence[object], n_tokens: int) -> int:
        """Of the first ``n_tokens`` of ``tokens`` (whole cached blocks), those in blocks no
        request holds now."""
        chain = self._chain(tokens[:n_tokens], hit=False)
        return sum(self.block_tokens for bid in chain if self._blocks[bid].lock == 0)

    def unlock(self, handle: Hold | list[int]) -> None:
        if not isinstance(handle, Hold):
            return  # nothing held (a request never admitted, or already let go)
        chain = handle.chain
        window = [chain[i] for i in handle.swa_at]
        for bid in chain:
            block = self._blocks.get(bid)
            if block is not None:
                block.lock -= 1
                if block.lock == 0 and block.children == 0:
                    self._push(bid)
        freed = []
        for bid in window:
            block = self._blocks.get(bid)
            if block is not None:
                block.swa_lock -= 1
                if block.swa_lock == 0 and not block.swa_kept:
                    self._drop_swa(block)
                elif block.swa_lock == 0:
                    freed.append(bid)
        self._restamp_swa(freed[::-1])  # the newest, tail first (vLLM frees a request's blocks so)

    def insert(self, tokens: Sequence[object], *, swa_tail: bool = True) -> int:
        """Store the full blocks of ``tokens``; return how many tokens were new. With
        sliding-window layers and ``swa_tail``, the sliding parts of the tail before its replay
        boundary too (a prompt; vLLM hashes those of no block past it, so a finished request's
        output adds full parts only)."""
        parent = _ROOT
        b = self.block_tokens
        added = 0
        chain: list[int] = []
        width = 8 * b
        raw = as_token_ids(tokens)[: len(tokens) // b * b].tobytes()
        for at in range(0, len(raw), width):
            key = (parent, raw[at : at + width])
            bid = self._ids.get(key)
            if bid is None:
                bid = self._next_id
                self._next_id += 1
                self._ids[key] = bid
                self._blocks[bid] = _Block(key, parent)
                if parent != _ROOT:
                    self._blocks[parent].children += 1
                added += b
            chain.append(bid)
            parent = bid
        if self.swa_groups and swa_tail:
            self._touch_swa(chain, len(tokens))
        for bid in chain:
            self._touch(bid)
        if self.capacity_blocks is not None and self.size_blocks > self.capacity_blocks:
            self.evict((self.size_blocks - self.capacity_blocks) * b)
        return added

    def resize(self, capacity_tokens: int) -> None:
        """A new capacity (a pool shared with running requests grew or shrank): evict what is over
        it now, if it can be (blocks in use stay)."""
        self.capacity_tokens = capacity_tokens
        self.capacity_blocks = capacity_tokens // self.block_tokens
        if self.size_blocks > self.capacity_blocks:
            self.evict((self.size_blocks - self.capacity_blocks) * self.block_tokens)

    def _oldest_swa(self) -> tuple[int, int, int] | None:
        """The oldest evictable sliding part (stale heap entries dropped), not popped."""
        heap = self._swa_heap
        while heap and not self._swa_evictable(*heap[0]):
            heapq.heappop(heap)
        return heap[0] if heap else None

    def evict(self, tokens_needed: int) -> int:
        """Free at least ``tokens_needed`` (pool blocks' tokens), oldest first; return the tokens
        freed."""
        blocks_needed = -(-tokens_needed // self.block_tokens)
        freed = 0
        told: set[int] = set()  # blocks under one already told of: their path is in its path
        while freed < blocks_needed:
            heap = self._heap  # (``_push`` may compact it into a new list)
            while heap and not self._evictable(*heap[0]):
                heapq.heappop(heap)
            swa = self._oldest_swa() if self.swa_groups else None
            stale = self._stale[0] if self._stale else None
            if stale is not None and (not heap or stale < heap[0][0]) and (swa is None or stale < swa[0]):
                heapq.heappop(self._stale)
                freed += 1
                continue
            if swa is not None and (not heap or swa[0] < heap[0][0]):
                heapq.heappop(self._swa_heap)
                block = self._blocks[swa[1]]
                block.swa -= 1
                block.swa_kept = block.swa > 0
                self.swa_count -= 1
                freed += 1
                continue
            if not heap:
                break
            _stamp, bid = heapq.heappop(heap)
            if self.on_evict is not None and bid not in told:
                self.on_evict(self._path(bid, told))
            blk = self._blocks.pop(bid)
            del self._ids[blk.key]
            freed += 1
            if blk.swa:
                self.swa_count -= blk.swa
                freed += blk.swa
                blk.swa = 0
            if blk.parent != _ROOT:
                parent = self._blocks[blk.parent]
                parent.children -= 1
                if parent.children == 0 and parent.lock == 0:
                    self._push(blk.parent)
        self.evicted_tokens += freed * self.block_tokens
        return freed * self.block_tokens

    def _path(self, bid: int, told: set[int]) -> TokenIds:
        """The tokens of the blocks from the first to ``bid``; each of them joins ``told``."""
        keys: list[bytes] = []
        while bid != _ROOT:
            block = self._blocks[bid]
            keys.append(block.key[1])
            told.add(bid)
            bid = block.parent
        path: TokenIds = array("q")
        path.frombytes(b"".join(reversed(keys)))
        return path

    def reset(self) -> None:
        self._blocks.clear()
        self._ids.clear()
        self._heap.clear()
        self._swa_heap.clear()
        self._stale.clear()
        self.swa_count = 0
