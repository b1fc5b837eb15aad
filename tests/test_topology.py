"""Topologies: generators build the graphs they promise; bad files are refused precisely."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from swarm.errors import InputError
from swarm.workload.catalog import default_catalog
from swarm.workload.topology import TopologyFile, TopologyTemplate, build_topology, load_topology


def build(generator: str, **params: object) -> TopologyTemplate:
    return build_topology(TopologyFile(name=generator, generator=generator, params=params))


def test_every_builtin_topology_loads_and_is_a_dag() -> None:
    cat = default_catalog()
    names = cat.topology_names()
    assert {"tree_of_thought", "beam", "graph_of_thought", "debate", "map_reduce", "react", "chain"} <= set(
        names
    )
    for name in names:
        t = cat.topology(name)
        assert nx.is_directed_acyclic_graph(t.graph)
        assert set(t.order) == set(t.graph.nodes)


def test_tree_of_thought_shape() -> None:
    t = build("tree_of_thought", branching=3, depth=2, evaluate=True, beam_width=2)
    roles = [t.role(n) for n in t.order]
    assert roles.count("plan") == 1 and roles.count("answer") == 1
    assert roles.count("expand") == 3 + 9 and roles.count("evaluate") == 3 + 9
    assert [g.keep for g in t.beams] == [2, 2]
    assert t.beams[0].candidates == ("t.0", "t.1", "t.2")
    assert t.gate("t.0.1") == "level1" and t.gate("answer") == "level2"
    assert t.context_parents("t.0.1/eval") == ["t.0.1"]
    assert t.context_ancestors("t.2.1") == ["t", "t.2"]


def test_beam_has_no_evaluate_calls() -> None:
    t = build("beam", width=2, branching=2, steps=3)
    assert all(t.role(n) != "evaluate" for n in t.graph)
    assert all(not g.scorers for g in t.beams)


def test_graph_of_thought_aggregates_all_fanout() -> None:
    t = build("graph_of_thought", fanout=4, levels=2, refine=False)
    assert sorted(t.context_parents("g1.agg")) == [f"g1.{i}" for i in range(4)]
    assert t.context_parents("g2.0") == ["g1.agg"]


def test_debate_rounds_see_all_previous_turns() -> None:
    t = build("debate", agents=3, rounds=3)
    assert sorted(t.context_parents("r3.a1")) == sorted(f"r{r}.a{a}" for r in (1, 2) for a in range(3))
    assert t.context_parents("r1.a0") == []
    assert len(t.context_parents("judge")) == 9


def test_map_reduce_and_react_and_chain() -> None:
    mr = build("map_reduce", chunks=5)
    assert sorted(mr.context_parents("reduce")) == [f"map{i}" for i in range(5)]
    react = build("react", steps=2)
    assert list(react.order) == ["think", "call1", "obs1", "call2", "obs2", "answer"]
    assert react.graph.nodes["call1"]["tool_after"]
    chain = build("chain", length=3)
    assert [chain.role(n) for n in chain.order] == ["plan", "expand", "answer"]


def test_explicit_graph_depths() -> None:
    t = default_catalog().topology("plan_execute_verify")
    depths = {n: t.graph.nodes[n]["depth"] for n in t.graph}
    assert depths == {"plan": 0, "exec_a": 1, "exec_b": 1, "verify": 2, "answer": 3}


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "topo.yaml"
    p.write_text(text)
    return p


GRAPH = """
name: g
graph:
  nodes:
    - {{id: a, role: plan}}
    - {{id: b, role: {role_b}}}
  links:
    - {{source: a, target: b}}
{extra}
"""


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (GRAPH.format(role_b="expand", extra="    - {source: b, target: a}"), "graph.links: cycle"),
        (
            GRAPH.format(role_b="expand", extra="    - {source: a, target: zz}"),
            "graph.links.1.target: unknown node 'zz'",
        ),
        (GRAPH.format(role_b="wizard", extra=""), "graph.nodes.1: Value error, unknown role 'wizard'"),
        ("name: g\ngraph:\n  nodes:\n    - {id: a}\n", "graph.nodes.0.role: Field required"),
        (
            "name: t\ngenerator: tree_of_thought\nparams: {branching: 0}\n",
            "params.branching: Input should be greater than or equal to 1",
        ),
        (
            "name: t\ngenerator: tree_of_thought\nparams: {depth: 99}\n",
            "params.depth: Input should be less than or equal to 8",
        ),
        ("name: t\ngenerator: tree_of_thought\nparams: {width: 2}\n", "params.width: unknown key"),
        ("name: t\ngenerator: spiral\n", "unknown generator 'spiral'"),
        ("name: t\ngenerator: chain\ncolour: red\n", "colour: unknown key"),
        ("name: t\ngenerator: [chain\n", "invalid YAML at line"),
    ],
)
def test_bad_topology_files_name_file_and_field(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_topology(path)
    assert str(path) in str(err.value)
    assert needle in str(err.value)
