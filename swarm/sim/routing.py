"""Routing policies of a simulated fleet: which replica a request goes to.

Place in the map (docs/architecture.md, "Simulation"): the router in front of a simulated
fleet (``sim.twin_client``). Each policy sees the prompt and the replicas' loads (requests the
router has sent and not yet seen end, as a router counts them) and names a replica.

- ``round_robin``: in turn.
- ``least_load``: the fewest requests in flight (the first of equals).
- ``cache_aware``: SGLang's router's policy (sglang-router 0.3.2, ``--policy cache_aware``;
  its defaults from ``launch_router --help``): while the loads are imbalanced
  (``max - min > balance_abs_threshold`` (64) and ``max > min * balance_rel_threshold`` (1.5))
  the least loaded replica; otherwise the replica whose tree of the prompts sent to it matches
  the longest share of this prompt, if that share is above ``cache_threshold`` (0.3), else the
  replica with the smallest tree. The prompt then enters the chosen replica's tree. The router
  matches characters of the request's text; here its tree holds tokens (the emulator's
  ``RadixCache``, at most ``max_tree_tokens`` each, least recently used leaves evicted: the
  router evicts by size on a timer, every 60 s by default). A tree holds each id by its low 32
  bits (``workload.prefix.narrow_ids``): the trees keep every prompt routed, 480 MB of 64-bit
  ids for 2,000 agents on 64 replicas, and they are only matched, never read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from swarm.emulator.radix_cache import RadixCache
from swarm.token_ids import TokenIds, as_token_ids
from swarm.workload.prefix import narrow_ids

RoutingPolicy = Literal["round_robin", "least_load", "cache_aware"]
ROUTING_POLICIES: tuple[str, ...] = ("round_robin", "least_load", "cache_aware")

#: sglang-router 0.3.2's defaults (``python -m sglang_router.launch_router --help``)
CACHE_THRESHOLD = 0.3
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5
#: the tree's size per replica, in tokens (the router's default is 2**26 characters)
MAX_TREE_TOKENS = 2**24


class Router(Protocol):
    def choose(self, prompt: TokenIds, loads: Sequence[int]) -> int: ...


class RoundRobin:
    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self._next = 0

    def choose(self, prompt: TokenIds, loads: Sequence[int]) -> int:
        chosen = self._next
        self._next = (self._next + 1) % self.replicas
        return chosen


class LeastLoad:
    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    def choose(self, prompt: TokenIds, loads: Sequence[int]) -> int:
        return min(range(self.replicas), key=loads.__getitem__)


class CacheAware:
    """SGLang's router's cache-aware policy (the module docstring)."""

    def __init__(
        self,
        replicas: int,
        *,
        cache_threshold: float = CACHE_THRESHOLD,
        balance_abs_threshold: int = BALANCE_ABS_THRESHOLD,
        balance_rel_threshold: float = BALANCE_REL_THRESHOLD,
        max_tree_tokens: int = MAX_TREE_TOKENS,
    ) -> None:
        self.trees = [RadixCache(max_tree_tokens) for _ in range(replicas)]
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold

    def choose(self, prompt: TokenIds, loads: Sequence[int]) -> int:
        replicas = range(len(self.trees))
        low, high = min(loads), max(loads)
        ids = narrow_ids(as_token_ids(prompt))
        if high - low > self.balance_abs_threshold and high > low * self.balance_rel_threshold:
            chosen = min(replicas, key=loads.__getitem__)
        else:
            matched = [tree.match(ids) for tree in self.trees]
            best = max(replicas, key=matched.__getitem__)
            if prompt and matched[best] / len(prompt) > self.cache_threshold:
                chosen = best
            else:
                chosen = min(replicas, key=lambda i: self.trees[i].size_tokens)
        self.trees[chosen].insert(ids)
        return chosen


def make_router(policy: str, replicas: int) -> Router:
    """The router of ``policy`` over ``replicas`` replicas."""
    if policy == "round_robin":
        return RoundRobin(replicas)
    if policy == "least_load":
        return LeastLoad(replicas)
    if policy == "cache_aware":
        return CacheAware(replicas)
    raise ValueError(f"unknown routing policy {policy!r} (known: {', '.join(ROUTING_POLICIES)})")
