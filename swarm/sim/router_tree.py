"""The cache-aware router's one tree of every prompt it has routed, each node naming its replicas.

Place in the map (docs/architecture.md, "Simulation"): the state of ``sim.routing.CacheAware``.
SGLang's router (sglang-router 0.3.2, ``src/tree.rs``) keeps a single radix tree for all its
workers ("tenants"): a node holds a run of the request's text and, per tenant that sent a
prompt through the whole of it, when that tenant last used it. Here a node's run is token ids
(each by its low 32 bits: ``workload.prefix.narrow_ids``), and "when" is a logical tick, so
the order of uses is exact and a run is deterministic.

- ``insert(ids, tenant)``: the path of ``ids``, its nodes split where it leaves one, every
  node on it (the root too) stamped with ``tenant`` now; ``tokens[tenant]`` grows by the
  tokens of each node the tenant had not held (the router's ``tenant_char_count``).
- ``prefix_match(ids)``: how far ``ids`` follow the tree (into a node's run, partly), and a
  tenant of the deepest node reached: each of that node's tenants sent the whole path to it, so
  those are the tenants whose own prompts match longest. The router takes the first of its map
  (an order of hashes); here the lowest index among them, which is the choice the per-replica
  trees of earlier versions made. That tenant's stamps are renewed from the node to the root.
- ``smallest_tenant()``: the fewest tokens held (the lowest index of equals).
- ``evict(max_tokens)``: for each tenant holding more than ``max_tokens``, its leaves (nodes
  it holds and none of whose children it holds) least recently used first, the tenant dropped
  from each until it fits; a node no tenant holds any more leaves the tree, and a parent that
  becomes the tenant's leaf joins the queue. The router runs this on a timer
  (``--eviction-interval-secs``, 60 s), not on each insert, so a tenant may hold more than the
  cap between runs.

One tree rather than one per replica: a prefix that several replicas were sent (a system
prompt) is held once, and a prompt is matched by one walk, not one per replica.
"""

from __future__ import annotations

import heapq
import itertools
from array import array

from swarm.token_ids import TokenIds, common_prefix


class _Node:
    __slots__ = ("children", "key", "parent", "tenants")

    def __init__(self, key: TokenIds, parent: _Node | None, tenants: dict[int, int]) -> None:
        self.key = key
        self.children: dict[int, _Node] = {}
        self.parent = parent
        #: replica index -> the tick it last used this node
        self.tenants = tenants


class TenantTree:
    """SGLang's router's multi-tenant radix tree over token ids (the module docstring)."""

    def __init__(self, tenants: int) -> None:
        if tenants < 1:
            raise ValueError("a router's tree has at least one tenant")
        # the router enters each worker with an empty text: the root holds every tenant
        self.root = _Node(array("I"), None, dict.fromkeys(range(tenants), 0))
        #: tokens held per tenant (each node counted once for each tenant holding it)
        self.tokens = [0] * tenants
        #: nodes below the root
        self.nodes = 0
        self.evicted_tokens = 0
        self._tick = 0

    def insert(self, ids: TokenIds, tenant: int) -> None:
        """Add ``ids`` as a path held by ``tenant``, stamped now."""
        self._tick += 1
        tick, tokens = self._tick, self.tokens
        node = self.root
        node.tenants[tenant] = tick
        pos, end = 0, len(ids)
        while pos < end:
            child = node.children.get(ids[pos])
            if child is None:
                node.children[ids[pos]] = _Node(ids[pos:], node, {tenant: tick})
                self.nodes += 1
                tokens[tenant] += end - pos
                return
            shared = common_prefix(child.key, ids, pos)
            if shared < len(child.key):  # leaves the run: split it, the tail below
                middle = _Node(child.key[:shared], node, dict(child.tenants))
                node.children[ids[pos]] = middle
                child.key = child.key[shared:]
                child.parent = middle
                middle.children[child.key[0]] = child
                self.nodes += 1
                child = middle
            if tenant not in child.tenants:
                tokens[tenant] += len(child.key)
            child.tenants[tenant] = tick
            pos += shared
            node = child

    def prefix_match(self, ids: TokenIds) -> tuple[int, int]:
        """(tokens of ``ids`` matched, the tenant chosen), the tenant's path stamped now."""
        node, pos, end = self.root, 0, len(ids)
        while pos < end:
            child = node.children.get(ids[pos])
            if child is None:
                break
            shared = common_prefix(child.key, ids, pos)
            pos += shared
            node = child
            if shared < len(child.key):
                break
        tenant = min(node.tenants)
        self._tick += 1
        at: _Node | None = node
        while at is not None:
            at.tenants[tenant] = self._tick
            at = at.parent
        return pos, tenant

    def smallest_tenant(self) -> int:
        tokens = self.tokens
        return min(range(len(tokens)), key=tokens.__getitem__)

    def evict(self, max_tokens: int) -> int:
        """Drop each tenant over ``max_tokens`` from its least recently used leaves until it
        fits; the tokens dropped (summed over tenants)."""
        tokens = self.tokens
        over = {t for t, held in enumerate(tokens) if held > max_tokens}
        if not over:
            return 0
        queue: list[tuple[int, int, int, _Node]] = []
        order = itertools.count()  # equal stamps of one tenant are one path's: never two leaves
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            for tenant in over.intersection(node.tenants):
                if self._leaf_of(node, tenant):
                    queue.append((node.tenants[tenant], tenant, next(order), node))
        heapq.heapify(queue)
        freed = 0
        while queue:
            _, tenant, _, node = heapq.heappop(queue)
            if tokens[tenant] <= max_tokens:
                continue
            del node.tenants[tenant]
            tokens[tenant] -= len(node.key)
            freed += len(node.key)
            parent = node.parent
            assert parent is not None
            if not node.children and not node.tenants:
                del parent.children[node.key[0]]
                node.parent = None
                self.nodes -= 1
            if parent is not self.root and self._leaf_of(parent, tenant):
                heapq.heappush(queue, (parent.tenants[tenant], tenant, next(order), parent))
        self.evicted_tokens += freed
        return freed

    @staticmethod
    def _leaf_of(node: _Node, tenant: int) -> bool:
        """``tenant`` holds ``node`` and none of its children."""
        return tenant in node.tenants and not any(tenant in child.tenants for child in node.children.values())
