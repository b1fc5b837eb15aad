"""Routing policies of a simulated fleet: which replica a request goes to.

Place in the map (docs/architecture.md, "Simulation"): the router in front of a simulated
fleet (``sim.twin_client``). Each policy sees the prompt and the replicas' loads (requests the
router has sent and not yet seen end, as a router counts them) and names a replica.

- ``round_robin``: in turn.
- ``least_load``: the fewest requests in flight (the first of equals).
- ``cache_aware``: SGLang's router's policy (sglang-router 0.3.2, ``--policy cache_aware``,
  ``src/policies/cache_aware.rs``; its defaults from ``launch_router --help``): while the loads
  are imbalanced (``max - min > balance_abs_threshold`` (64) and ``max > min *
  balance_rel_threshold`` (1.5)) the least loaded replica; otherwise the replica the router's
  one tree names for the longest prefix of this prompt (``sim.router_tree.TenantTree``) if
  that prefix is more than ``cache_threshold`` (0.3) of the prompt, else the least loaded
  replica (the first of equals in replica order; the router's order is a hash map's over its
  workers' ids). The prompt then enters the tree as the chosen replica's. The
  router matches characters of the request's text; here its tree holds token ids. Every
  ``eviction_interval_s`` (60 s, the router's ``--eviction-interval-secs``; 0 turns it off
  here, as in the router's policy code, whose command line refuses 0) of the clock it is given
  (the simulation's virtual clock, from the run's start; the router's timer runs from its own
  start; none: no evictions), each replica
  holding more than ``max_tree_tokens`` gives up its least recently used leaves until it fits
  (the router's ``--max-tree-size`` is 2**26 characters; here 2**24 tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from swarm.sim.router_tree import TenantTree
from swarm.texts import SharedRun
from swarm.token_ids import PromptIds, as_token_ids
from swarm.workload.edges import narrow_ids

RoutingPolicy = Literal["round_robin", "least_load", "cache_aware"]
ROUTING_POLICIES: tuple[str, ...] = ("round_robin", "least_load", "cache_aware")

#: sglang-router 0.3.2's defaults (``python -m sglang_router.launch_router --help``)
CACHE_THRESHOLD = 0.3
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5
#: the tree's size per replica, in tokens (the router's default is 2**26 characters)
MAX_TREE_TOKENS = 2**24
#: seconds between the router's evictions (``--eviction-interval-secs``)
EVICTION_INTERVAL_S = 60.0


class Router(Protocol):
    """Names the replica for ``prompt`` given the replicas' ``loads``; ``runs``: where the
    prompt's ids are stretches of the corpus's (a tree of prompts holds those by reference)."""

    def choose(self, prompt: PromptIds, loads: Sequence[int], runs: Sequence[SharedRun] = ()) -> int: ...


class RoundRobin:
    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self._next = 0

    def choose(self, prompt: PromptIds, loads: Sequence[int], runs: Sequence[SharedRun] = ()) -> int:
        chosen = self._next
        self._next = (self._next + 1) % self.replicas
        return chosen


class LeastLoad:
    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    def choose(self, prompt: PromptIds, loads: Sequence[int], runs: Sequence[SharedRun] = ()) -> int:
        return min(range(self.replicas), key=loads.__getitem__)


class CacheAware:
    """SGLang's router's cache-aware policy (the module docstring). ``clock_s`` times its
    evictions (the virtual clock in a simulation; None: it never evicts)."""

    def __init__(
        self,
        replicas: int,
        *,
        cache_threshold: float = CACHE_THRESHOLD,
        balance_abs_threshold: int = BALANCE_ABS_THRESHOLD,
        balance_rel_threshold: float = BALANCE_REL_THRESHOLD,
        max_tree_tokens: int = MAX_TREE_TOKENS,
        eviction_interval_s: float = EVICTION_INTERVAL_S,
        clock_s: Callable[[], float] | None = None,
    ) -> None:
        self.tree = TenantTree(replicas)
        self.replicas = replicas
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.max_tree_tokens = max_tree_tokens
        self.eviction_interval_s = eviction_interval_s
        self._clock_s = clock_s if eviction_interval_s > 0 else None
        self._next_eviction_s = self._clock_s() + eviction_interval_s if self._clock_s is not None else 0.0

    def choose(self, prompt: PromptIds, loads: Sequence[int], runs: Sequence[SharedRun] = ()) -> int:
        if self._clock_s is not None:
            self._evict_when_due(self._clock_s())
        tree = self.tree
        low, high = min(loads), max(loads)
        ids = narrow_ids(as_token_ids(prompt))
        chosen = -1
        if not (high - low > self.balance_abs_threshold and high > low * self.balance_rel_threshold):
            matched, named = tree.prefix_match(ids)
            if prompt and matched / len(prompt) > self.cache_threshold:
                chosen = named
        if chosen < 0:  # imbalanced, or too little matched: the least loaded
            chosen = min(range(self.replicas), key=loads.__getitem__)
        tree.insert(ids, chosen, runs)
        return chosen

    def _evict_when_due(self, now_s: float) -> None:
        """The router's eviction timer: one eviction for the intervals that ended since the
        last request (the tree changes only on requests, so it evicts the same)."""
        if now_s < self._next_eviction_s:
            return
        while self._next_eviction_s <= now_s:
            self._next_eviction_s += self.eviction_interval_s
        self.tree.evict(self.max_tree_tokens)


def make_router(policy: str, replicas: int, clock_s: Callable[[], float] | None = None) -> Router:
    """The router of ``policy`` over ``replicas`` replicas (``clock_s`` times a cache-aware
    router's evictions; None: it never evicts)."""
    if policy == "round_robin":
        return RoundRobin(replicas)
    if policy == "least_load":
        return LeastLoad(replicas)
    if policy == "cache_aware":
        return CacheAware(replicas, clock_s=clock_s)
    raise ValueError(f"unknown routing policy {policy!r} (known: {', '.join(ROUTING_POLICIES)})")
