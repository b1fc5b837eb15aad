"""Worker placement over Ray nodes (``swarm.cluster.placement``), in one process."""

from __future__ import annotations

from collections import Counter

from swarm.cluster.placement import NodeCapacity, nodes_with_cpus, plan_placement, worker_counts


def nodes(*cpus: float) -> list[NodeCapacity]:
    return [NodeCapacity(f"n{i}", f"10.0.0.{i}", c) for i, c in enumerate(cpus)]


def test_workers_go_to_every_node_in_proportion_to_its_cpus_dealt_in_turn() -> None:
    plan = plan_placement(nodes(4, 2, 2), 8)
    assert Counter(plan.node_ids) == {"n0": 4, "n1": 2, "n2": 2}
    assert list(plan.node_ids[:3]) == ["n0", "n1", "n2"]  # worker 0, 1, 2 on different nodes
    assert plan.cpus_each == 1.0


def test_every_node_gets_one_and_the_rest_follow_the_cpus() -> None:
    assert worker_counts(nodes(16, 1, 1), 3) == [1, 1, 1]
    assert worker_counts(nodes(8, 8, 1), 16) == [8, 7, 1]  # whole CPUs each, not [7, 7, 2]
    assert plan_placement(nodes(8, 8, 1), 16).cpus_each == 1.0
    assert worker_counts(nodes(1, 16, 2), 2) == [0, 1, 1]  # fewer workers than nodes: the largest
    counts = worker_counts(nodes(3, 1, 1, 5), 13)
    assert sum(counts) == 13 and min(counts) >= 1 and counts[3] == max(counts)


def test_more_workers_than_cpus_share_them_so_all_fit_at_once() -> None:
    plan = plan_placement(nodes(1, 1), 32)
    assert Counter(plan.node_ids) == {"n0": 16, "n1": 16}
    assert plan.cpus_each == 0.0625
    for cpus in [(2, 1), (2,), (1,), (3, 3, 1), (8, 8, 1), (5, 2)]:
        for workers in range(1, 33):
            placed = plan_placement(nodes(*cpus), workers)
            # as Ray keeps amounts: in 1/10,000 units, rounded to nearest
            units = round(placed.cpus_each * 10_000)
            for n, count in Counter(placed.node_ids).items():
                assert count * units <= nodes(*cpus)[int(n[1:])].cpus * 10_000, (cpus, workers)
            assert len(placed.node_ids) == workers


def test_only_alive_nodes_with_cpus_take_workers() -> None:
    reported = [
        {"NodeID": "head", "NodeManagerAddress": "10.0.0.1", "Alive": True, "Resources": {"memory": 1.0}},
        {"NodeID": "dead", "NodeManagerAddress": "10.0.0.2", "Alive": False, "Resources": {"CPU": 8.0}},
        {"NodeID": "b", "NodeManagerAddress": "10.0.0.4", "Alive": True, "Resources": {"CPU": 2.0}},
        {"NodeID": "a", "NodeManagerAddress": "10.0.0.3", "Alive": True, "Resources": {"CPU": 2.0}},
    ]
    found = nodes_with_cpus(reported)
    assert [n.node_id for n in found] == ["a", "b"]
    assert plan_placement(found, 3).node_ids == ("a", "b", "a")


def test_no_node_with_cpus_leaves_placement_to_ray() -> None:
    plan = plan_placement([], 4)
    assert plan.node_ids == () and plan.cpus_each == 1.0
