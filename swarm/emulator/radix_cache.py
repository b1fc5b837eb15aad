"""Token-level radix prefix cache with LRU eviction of unreferenced leaves (SGLang's model).

Place in the map (docs/architecture.md, "The emulator"): the prefix cache of the ``sglang`` profile.
A compressed radix tree over token ids (``swarm.token_ids``): each edge holds a run of them,
an array whose slices compare in C; a request's
cached tokens are the length of the longest path from the root that matches its prompt, at
token granularity. Inserting a sequence adds only the tokens not already present. When the
tree holds more than ``capacity_tokens``, leaves that no running request references are
evicted, least recently used first, until it fits (a leaf's parent may then become a leaf
and be evicted in turn). ``capacity_tokens=None`` means unbounded. ``on_evict`` hears each
evicted leaf's whole token path (the engine model's host tier keeps it).

Access times come from a logical counter, so eviction order is deterministic. Evictable
leaves sit in a heap keyed by last access, with lazy deletion: an entry is pushed whenever a
node becomes (or, as a leaf, is touched as) a candidate, and stale entries are skipped when
popped, so eviction costs O(log n) per leaf instead of a walk over the whole tree.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Sequence

from swarm.token_ids import TokenIds, as_token_ids, common_prefix


class _Node:
    __slots__ = ("children", "key", "last_access", "lock", "parent")

    def __init__(self, key: TokenIds, parent: _Node | None) -> None:
        self.key = key
        self.children: dict[int, _Node] = {}
        self.parent = parent
        self.last_access = 0
        self.lock = 0


class RadixCache:
    """Prefix cache at token granularity. See the module docstring for the model."""

    #: the prompt enters on ``insert`` (a slot cache fills on ``lock``); tokens restored from a
    #: tier of its own (a slot cache's RAM prompt cache; none here)
    fills_on_lock = False
    loaded_tokens = 0

    block_tokens = 1

    def __init__(self, capacity_tokens: int | None = None) -> None:
        if capacity_tokens is not None and capacity_tokens < 1:
            raise ValueError("capacity_tokens must be >= 1 or None")
        self.capacity_tokens = capacity_tokens
        self.root = _Node(array("q"), None)
        self.size_tokens = 0
        self.evicted_tokens = 0
        self._tick = 0
        self._heap: list[tuple[int, int, _Node]] = []
        self._nodes = 0
        #: called with the whole token path of each evicted leaf (a host tier keeps it)
        self.on_evict: Callable[[TokenIds], object] | None = None

    def _touch(self, node: _Node) -> None:
        self._tick += 1
        node.last_access = self._tick
        if not node.children and node is not self.root:
            self._push(node)

    def _push(self, node: _Node) -> None:
        heapq.heappush(self._heap, (node.last_access, id(node), node))
        if len(self._heap) > 4 * self._nodes + 64:  # drop stale entries now and then
            self._heap = [e for e in self._heap if self._evictable(e[2], e[0])]
            heapq.heapify(self._heap)

    def _evictable(self, node: _Node, stamp: int) -> bool:
        return node.parent is not None and not node.children and node.lock == 0 and node.last_access == stamp

    def _walk(self, tokens: TokenIds) -> tuple[int, list[_Node]]:
        """Matched length and the nodes on the matched path (last may be partially matched)."""
        node = self.root
        pos = 0
        path: list[_Node] = []
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                break
            n = common_prefix(child.key, tokens, pos)
            pos += n
            path.append(child)
            if n < len(child.key):
                break
            node = child
        return pos, path

    def match(self, tokens: Sequence[object]) -> int:
        """Number of leading tokens of ``tokens`` (ids, or words) present in the cache (marks
        them used)."""
        matched, path = self._walk(as_token_ids(tokens))
        for node in path:
            self._touch(node)
        return matched

    def peek(self, tokens: Sequence[object]) -> int:
        """``match`` without marking the matched tokens used."""
        return self._walk(as_token_ids(tokens))[0]

    def lock(self, tokens: Sequence[object]) -> list[_Node]:
        """Protect the matched path of ``tokens`` from eviction; returns a handle for unlock."""
        _, path = self._walk(as_token_ids(tokens))
        for node in path:
            node.lock += 1
        return path

    def unlock(self, handle: list[_Node]) -> None:
        for node in handle:
            node.lock -= 1
            if node.lock == 0 and not node.children and node.parent is not None:
                self._push(node)

    def insert(self, sequence: Sequence[object]) -> int:
        """Add ``sequence`` as a path; return how many tokens were new. May evict others."""
        tokens = as_token_ids(sequence)
        node = self.root
        pos = 0
        added = 0
        while pos < len(tokens):
            self._touch(node)
            child = node.children.get(tokens[pos])
            if child is None:
                leaf = _Node(tokens[pos:], node)
                node.children[tokens[pos]] = leaf
                self._nodes += 1
                self._touch(leaf)
                added = len(tokens) - pos
                break
            n = common_prefix(child.key, tokens, pos)
            if n < len(child.key):
                # split the edge: child keeps its tail under a new middle node
                middle = _Node(child.key[:n], node)
                self._nodes += 1
                middle.lock = child.lock
                middle.last_access = child.last_access
                node.children[tokens[pos]] = middle
                child.key = child.key[n:]
                child.parent = middle
                middle.children[child.key[0]] = child
                child = middle
            pos += n
            node = child
        else:
            self._touch(node)
        self.size_tokens += added
        if self.capacity_tokens is not None and self.size_tokens > self.capacity_tokens:
            self.evict(self.size_tokens - self.capacity_tokens)
        return added

    def evict(self, tokens_needed: int) -> int:
        """Evict unreferenced leaves, LRU first, until ``tokens_needed`` are freed (or none left)."""
        freed = 0
        heap = self._heap
        while heap and freed < tokens_needed:
            stamp, _, leaf = heapq.heappop(heap)
            if not self._evictable(leaf, stamp):
                continue
            parent = leaf.parent
            assert parent is not None
            if self.on_evict is not None:
                self.on_evict(self._path(leaf))
            del parent.children[leaf.key[0]]
            leaf.parent = None
            self._nodes -= 1
            freed += len(leaf.key)
            if parent is not self.root and not parent.children and parent.lock == 0:
                self._push(parent)
        self.size_tokens -= freed
        self.evicted_tokens += freed
        return freed

    @staticmethod
    def _path(node: _Node) -> TokenIds:
        """The tokens from the root to the end of ``node``."""
        keys: list[TokenIds] = []
        at: _Node | None = node
        while at is not None and at.parent is not None:
            keys.append(at.key)
            at = at.parent
        path: TokenIds = array(node.key.typecode)  # a router's tree holds narrowed ids
        for key in reversed(keys):
            path += key
        return path

    def reset(self) -> None:
        """Drop everything (``/flush_cache``)."""
        self.root = _Node(array("q"), None)
        self.size_tokens = 0
        self._heap = []
        self._nodes = 0
