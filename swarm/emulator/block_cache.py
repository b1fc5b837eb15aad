"""Block prefix cache that reuses only full blocks (TensorRT-LLM's KV block reuse model).

Place in the map (docs/architecture.md, "The emulator"): the prefix cache of the ``trtllm`` profile.
A prompt is cut into blocks of ``block_tokens`` (32 by default); block *i* is identified by
its tokens and the identity of block *i-1*, so a block matches only when the whole prefix up
to it matches. Cached tokens are ``matched_full_blocks * block_tokens``; a trailing partial
block is never reused. When more than ``capacity_tokens // block_tokens`` blocks are stored,
unreferenced leaf blocks (no stored child) are evicted, least recently used first;
``on_evict`` hears the tokens up to each evicted block (the engine model's host tier keeps them).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

_ROOT = 0


class _Block:
    __slots__ = ("children", "key", "last_access", "lock", "parent")

    def __init__(self, key: tuple[int, tuple[str, ...]], parent: int) -> None:
        self.key = key
        self.parent = parent
        self.children = 0
        self.last_access = 0
        self.lock = 0


class BlockCache:
    """Prefix cache at block granularity. See the module docstring for the model."""

    #: the prompt enters on ``insert`` (a slot cache fills on ``lock``); tokens restored from a
    #: tier of its own (a slot cache's RAM prompt cache; none here)
    fills_on_lock = False
    loaded_tokens = 0

    def __init__(self, capacity_tokens: int | None = None, block_tokens: int = 32) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self.capacity_tokens = capacity_tokens
        self.capacity_blocks = None if capacity_tokens is None else capacity_tokens // block_tokens
        self._blocks: dict[int, _Block] = {}
        self._ids: dict[tuple[int, tuple[str, ...]], int] = {}
        self._next_id = 1
        self._tick = 0
        self.evicted_tokens = 0
        # evictable leaf blocks by last access, with lazy deletion (see RadixCache's docstring)
        self._heap: list[tuple[int, int]] = []
        #: called with the tokens from the first block to each evicted one (a host tier keeps them)
        self.on_evict: Callable[[list[str]], object] | None = None

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

    @property
    def size_tokens(self) -> int:
        return len(self._blocks) * self.block_tokens

    def _chain(self, tokens: Sequence[str]) -> list[int]:
        """Stored block ids matching the prompt's leading full blocks."""
        out: list[int] = []
        parent = _ROOT
        b = self.block_tokens
        for i in range(len(tokens) // b):
            bid = self._ids.get((parent, tuple(tokens[i * b : (i + 1) * b])))
            if bid is None:
                break
            out.append(bid)
            parent = bid
        return out

    def match(self, tokens: Sequence[str]) -> int:
        chain = self._chain(tokens)
        for bid in chain:
            self._touch(bid)
        return len(chain) * self.block_tokens

    def lock(self, tokens: Sequence[str]) -> list[int]:
        chain = self._chain(tokens)
        for bid in chain:
            self._blocks[bid].lock += 1
        return chain

    def unlocked_tokens(self, tokens: Sequence[str], n_tokens: int) -> int:
        """Of the first ``n_tokens`` of ``tokens`` (whole cached blocks), those in blocks no
        request holds now."""
        chain = self._chain(tokens[:n_tokens])
        return sum(self.block_tokens for bid in chain if self._blocks[bid].lock == 0)

    def unlock(self, handle: list[int]) -> None:
        for bid in handle:
            block = self._blocks.get(bid)
            if block is not None:
                block.lock -= 1
                if block.lock == 0 and block.children == 0:
                    self._push(bid)

    def insert(self, tokens: Sequence[str]) -> int:
        """Store the full blocks of ``tokens``; return how many tokens were new."""
        parent = _ROOT
        b = self.block_tokens
        added = 0
        for i in range(len(tokens) // b):
            key = (parent, tuple(tokens[i * b : (i + 1) * b]))
            bid = self._ids.get(key)
            if bid is None:
                bid = self._next_id
                self._next_id += 1
                self._ids[key] = bid
                self._blocks[bid] = _Block(key, parent)
                if parent != _ROOT:
                    self._blocks[parent].children += 1
                added += b
            self._touch(bid)
            parent = bid
        if self.capacity_blocks is not None and len(self._blocks) > self.capacity_blocks:
            self.evict((len(self._blocks) - self.capacity_blocks) * b)
        return added

    def resize(self, capacity_tokens: int) -> None:
        """A new capacity (a pool shared with running requests grew or shrank): evict what is over
        it now, if it can be (blocks in use stay)."""
        self.capacity_tokens = capacity_tokens
        self.capacity_blocks = capacity_tokens // self.block_tokens
        if len(self._blocks) > self.capacity_blocks:
            self.evict((len(self._blocks) - self.capacity_blocks) * self.block_tokens)

    def evict(self, tokens_needed: int) -> int:
        blocks_needed = -(-tokens_needed // self.block_tokens)
        freed = 0
        heap = self._heap
        told: set[int] = set()  # blocks under one already told of: their path is in its path
        while heap and freed < blocks_needed:
            stamp, bid = heapq.heappop(heap)
            if not self._evictable(stamp, bid):
                continue
            if self.on_evict is not None and bid not in told:
                self.on_evict(self._path(bid, told))
            blk = self._blocks.pop(bid)
            del self._ids[blk.key]
            freed += 1
            if blk.parent != _ROOT:
                parent = self._blocks[blk.parent]
                parent.children -= 1
                if parent.children == 0 and parent.lock == 0:
                    self._push(blk.parent)
        self.evicted_tokens += freed * self.block_tokens
        return freed * self.block_tokens

    def _path(self, bid: int, told: set[int]) -> list[str]:
        """The tokens of the blocks from the first to ``bid``; each of them joins ``told``."""
        keys: list[tuple[str, ...]] = []
        while bid != _ROOT:
            block = self._blocks[bid]
            keys.append(block.key[1])
            told.add(bid)
            bid = block.parent
        return [t for key in reversed(keys) for t in key]

    def reset(self) -> None:
        self._blocks.clear()
        self._ids.clear()
        self._heap.clear()
