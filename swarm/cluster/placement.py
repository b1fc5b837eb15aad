"""Worker placement: which node each worker actor goes to, and how many CPUs it takes.

Place in the map (docs/architecture.md, "Ray"): used by the RayExecutor before it creates its
workers. The plan is computed here from the nodes Ray reports (pure, tested in one process);
the executor pins each actor to its node with a soft node-affinity strategy, so Ray still
places it elsewhere when that node is gone by the time the actor starts.

The rule: only alive nodes with CPUs take workers (a head started with ``--num-cpus 0``
takes none). Workers are shared out in proportion to each node's CPUs by largest remainder,
every node getting at least one (fewer workers than nodes: one each on the nodes with the
most CPUs). They are dealt
in turn (worker 0 on the first node, worker 1 on the second, ...) so that sessions, dealt
round-robin over workers, spread over nodes too. Each worker takes
``min(1, min over nodes of node CPUs / workers there)`` CPUs, rounded down to Ray's 1/10,000,
so all of them fit at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: Ray's resource granularity: amounts are kept in 1/10,000 units.
CPU_GRAIN = 10_000


@dataclass(frozen=True)
class NodeCapacity:
    """One Ray node as placement sees it."""

    node_id: str
    ip: str
    cpus: float


@dataclass(frozen=True)
class PlacementPlan:
    """Node of each worker (by index) and the CPUs every worker takes."""

    node_ids: tuple[str, ...]
    cpus_each: float


def nodes_with_cpus(ray_nodes: list[dict[str, Any]]) -> list[NodeCapacity]:
    """The alive nodes of ``ray.nodes()`` that have CPUs, sorted by address then id."""
    found = [
        NodeCapacity(str(n["NodeID"]), str(n.get("NodeManagerAddress", "")), float(n["Resources"]["CPU"]))
        for n in ray_nodes
        if n.get("Alive") and float(n.get("Resources", {}).get("CPU", 0.0)) > 0
    ]
    return sorted(found, key=lambda n: (n.ip, n.node_id))


def worker_counts(nodes: list[NodeCapacity], workers: int) -> list[int]:
    """How many of ``workers`` go to each node: in proportion to CPUs (largest remainder), at
    least one on every node; fewer workers than nodes go one each to the nodes with most CPUs."""
    if workers < 1 or not nodes:
        return [0] * len(nodes)
    if workers < len(nodes):
        largest = sorted(range(len(nodes)), key=lambda i: (-nodes[i].cpus, i))[:workers]
        return [1 if i in largest else 0 for i in range(len(nodes))]
    total = sum(n.cpus for n in nodes)
    shares = [workers * n.cpus / total for n in nodes]
    counts = [max(1, int(s)) for s in shares]
    while sum(counts) > workers:  # the minimum of one took some: from the most crowded node
        i = max(
            (i for i in range(len(nodes)) if counts[i] > 1), key=lambda i: (counts[i] / nodes[i].cpus, -i)
        )
        counts[i] -= 1
    while sum(counts) < workers:  # the remainders: to the largest
        i = max(range(len(nodes)), key=lambda i: (shares[i] - counts[i], nodes[i].cpus, -i))
        counts[i] += 1
    return counts


def plan_placement(nodes: list[NodeCapacity], workers: int) -> PlacementPlan:
    """Each worker's node, dealt in turn over the nodes, and the CPUs each worker takes.

    With no node that has CPUs (Ray reports none yet), the plan names no nodes and Ray places
    the workers itself.
    """
    counts = worker_counts(nodes, workers)
    if not nodes or not any(counts):
        return PlacementPlan((), 1.0)
    left = list(counts)
    order: list[str] = []
    while len(order) < workers:
        for i, node in enumerate(nodes):
            if left[i]:
                order.append(node.node_id)
                left[i] -= 1
    cpus_each = min([1.0] + [n.cpus / c for n, c in zip(nodes, counts, strict=True) if c])
    # Ray keeps resource amounts to 1/10,000, rounded to nearest: round down so all still fit
    return PlacementPlan(tuple(order), math.floor(cpus_each * CPU_GRAIN) / CPU_GRAIN)
