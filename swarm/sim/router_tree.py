"""The cache-aware router's one tree of every prompt it has routed, each node naming its replicas.

Place in the map (docs/architecture.md, "Simulation"): the state of ``sim.routing.CacheAware``.
SGLang's router (sglang-router 0.3.2, ``src/policies/tree.rs``) keeps a single radix tree for
all its workers ("tenants"): a node holds a run of the request's text, the tenants that sent a
prompt through the whole of it, each with a last-use stamp (an epoch: one global counter,
taken once by each insert and each match), and the tenant that made it (``last_tenant``). Here
a node's run is token ids (each by its low 32 bits: ``workload.edges.narrow_ids``), its long
stretches of the corpus's ids held by reference where the prompt's sender says where they are
(``workload.edges``: a mid-life session's 100k-token history is a few hundred such runs).

- ``insert(ids, tenant, runs)``: the path of ``ids`` (its long ``runs`` of the corpus held by
  reference in a new node), a node split where it leaves one (the upper part takes the node's
  tenants and maker); the tenant joins each node on the path it did not hold
  with stamp 0 (``tokens[tenant]``, the router's ``tenant_char_count``, grows by that node's
  tokens); only the node where ``ids`` end (a new leaf, whose maker is this tenant, or a
  node it reached, whose maker stays) is stamped with a new epoch.
- ``prefix_match(ids)``: how far ``ids`` follow the tree (into a node's run, partly), and the
  maker of the deepest node reached if it still holds the node, else another of its tenants
  (the router takes the first of a hash map's order; here the lowest index), remembered as the
  node's maker from then on. Every tenant holding that node sent the whole path to it, so it is
  one of the tenants whose own prompts match longest. The node's stamp for that tenant is
  renewed when the match's epoch is a multiple of 8, as the router does to spare its locks
  (its counter also counts inserts, and the workers' registration, so which matches stamp
  depends on where it starts: here at 0, a balanced request taking two epochs).
- ``evict(max_tokens)``: for each tenant holding more than ``max_tokens``, its leaves (nodes it
  holds and none of whose children it holds), the oldest stamp first, the tenant dropped from
  each until it fits; a node no tenant holds any more leaves the tree, and a parent that
  becomes the tenant's leaf joins the queue with its own stamp (0 if the tenant only passed
  through it). The router runs this on a timer (``--eviction-interval-secs``, 60 s), so a
  tenant may hold more than the cap between runs.

One tree rather than one per replica: a prefix that several replicas were sent (a system
prompt) is held once, and a prompt is matched by one walk, not one per replica.
"""

from __future__ import annotations

import heapq
import itertools
from array import array
from collections.abc import Hashable, Sequence

from swarm.texts import SharedRun
from swarm.token_ids import TokenIds
from swarm.workload.edges import Edge, RunReferences, edge_common, edge_cut, first_token


class _Node:
    __slots__ = ("children", "key", "maker", "parent", "tenants")

    def __init__(self, key: Edge, parent: _Node | None, tenants: dict[int, int], maker: int | None) -> None:
        self.key = key
        self.children: dict[Hashable, _Node] = {}
        self.parent = parent
        #: replica index -> the epoch it last used this node (0: it only passed through)
        self.tenants = tenants
        #: the tenant a match names first (the router's ``last_tenant``)
        self.maker = maker


class TenantTree:
    """SGLang's router's multi-tenant radix tree over token ids (the module docstring)."""

    def __init__(self, tenants: int) -> None:
        if tenants < 1:
            raise ValueError("a router's tree has at least one tenant")
        # the router enters each worker with an empty text: the root holds every tenant
        self.root = _Node(array("I"), None, dict.fromkeys(range(tenants), 0), None)
        #: tokens held per tenant (each node counted once for each tenant holding it)
        self.tokens = [0] * tenants
        #: nodes below the root
        self.nodes = 0
        self.evicted_tokens = 0
        self._epoch = 0
        #: the shared arrays prompts' runs are in, narrowed, and the edges made of them
        self._runs = RunReferences()

    @property
    def runs_refused(self) -> int:
        """Shared runs given whose ids were not the prompt's where they said (copied instead)."""
        return self._runs.refused

    def _next_epoch(self) -> int:
        epoch = self._epoch
        self._epoch += 1
        return epoch

    def insert(self, ids: TokenIds, tenant: int, runs: Sequence[SharedRun] = ()) -> None:
        """Add ``ids`` (narrowed: ``narrow_ids``) as a path held by ``tenant``; the node where
        they end stamped now. ``runs``: where ``ids`` are stretches of arrays that outlive them,
        in order (each checked against ``ids`` narrowed, so 64-bit ids would have every run
        refused; an array given must not change while the tree lives): a new node holds its
        long ones by reference."""
        tokens = self.tokens
        node = self.root
        pos, end = 0, len(ids)
        while pos < end:
            child = node.children.get(ids[pos])
            if child is None:
                key = self._runs.tail(ids, pos, runs) if runs else ids[pos:]
                node.children[ids[pos]] = _Node(key, node, {tenant: self._next_epoch()}, tenant)
                self.nodes += 1
                tokens[tenant] += end - pos
                return
            shared = edge_common(child.key, ids, pos)
            if shared < len(child.key):  # leaves the run: split it, the tail below
                head, child.key = edge_cut(child.key, shared)
                middle = _Node(head, node, dict(child.tenants), child.maker)
                node.children[ids[pos]] = middle
                child.parent = middle
                middle.children[first_token(child.key)] = child
                self.nodes += 1
                child = middle
            if tenant not in child.tenants:
                tokens[tenant] += len(child.key)
                child.tenants[tenant] = 0
            pos += shared
            node = child
        node.tenants[tenant] = self._next_epoch()

    def prefix_match(self, ids: TokenIds) -> tuple[int, int]:
        """(tokens of ``ids`` matched, the tenant named: the module docstring)."""
        node, pos, end = self.root, 0, len(ids)
        while pos < end:
            child = node.children.get(ids[pos])
            if child is None:
                break
            shared = edge_common(child.key, ids, pos)
            pos += shared
            node = child
            if shared < len(child.key):
                break
        tenant = node.maker
        if tenant is None or tenant not in node.tenants:
            tenant = node.maker = min(node.tenants)
        epoch = self._next_epoch()
        if epoch & 7 == 0:
            node.tenants[tenant] = epoch
        return pos, tenant

    def evict(self, max_tokens: int) -> int:
        """Drop each tenant over ``max_tokens`` from its least recently used leaves until it
        fits; the tokens dropped (summed over tenants)."""
        tokens = self.tokens
        over = {t for t, held in enumerate(tokens) if held > max_tokens}
        if not over:
            return 0
        queue: list[tuple[int, int, int, _Node]] = []
        order = itertools.count()  # equal stamps (0: passed through) in the order queued
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            mine = over.intersection(node.tenants)
            if not mine:
                continue
            # the tenants of its children, once (a check of each child for each tenant was 4 %
            # of a simulation of 64 replicas' trees)
            below = set().union(*(child.tenants for child in node.children.values())) if node.children else ()
            for tenant in mine:
                if tenant not in below:  # a leaf of it (``_leaf_of``)
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
                del parent.children[first_token(node.key)]
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
