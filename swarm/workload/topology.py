"""Topologies: the DAG templates of agent programs, built with networkx.

Place in the map (docs/architecture.md, "Workload"): a topology is a template; the Workload instantiates
one per agent session and the agent program walks it. Nodes are LLM calls with a ``role``;
edges say whose context a call inherits (``kind: context``) or only whom it waits for
(``kind: after``). A node's prompt is the system prompt, the task, the turns of its context
ancestors in topological order, then its own instruction, so siblings share exactly their
parent's context as a prefix.

Pruning: a ``BeamGroup`` lists candidate nodes, the evaluate nodes that score them (possibly
none) and how many to keep. Nodes whose ``gate`` names the group wait until it is decided;
candidates not kept are cut, and so are nodes all of whose context parents are cut or pruned.

Generators (``topologies/*.yaml`` name one with its ``params``): ``tree_of_thought``,
``beam``, ``graph_of_thought``, ``debate``, ``map_reduce``, ``react``, ``chain``; or an
explicit ``graph`` in networkx node-link form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from swarm.errors import InputError
from swarm.workload.specfiles import format_validation_error, load_yaml, validate

ROLES: tuple[str, ...] = (
    "plan", "expand", "evaluate", "aggregate", "answer", "think", "tool_call", "tool_result",
    "map", "reduce", "debate",
)  # fmt: skip
EDGE_KINDS = ("context", "after")
#: Largest template accepted (nodes); a larger one is refused with the parameters named.
MAX_TEMPLATE_NODES = 20_000


@dataclass(frozen=True)
class BeamGroup:
    name: str
    candidates: tuple[str, ...]
    scorers: tuple[str, ...]
    keep: int


@dataclass(frozen=True)
class RunIndex:
    """A template's starting point for each run (``TopologyTemplate.run_index``): each node's
    dependencies (its parents, and its beam's decision if gated), the beam groups by name,
    the groups each node is a member of, each group's count of members (a node both candidate
    and scorer counted once), and the nodes each group's decision gates. Shared: a run copies
    ``members`` (what it counts down), keeps the ``deps`` of the nodes it has answered for
    beside the table (``AgentRun._deps_of``), and reads the rest."""

    deps: dict[str, int]
    groups: dict[str, BeamGroup]
    member_of: dict[str, tuple[str, ...]]
    gated: dict[str, tuple[str, ...]]
    members: dict[str, int]


@dataclass(frozen=True)
class TopologyTemplate:
    """A validated DAG of LLM calls. ``order`` is a deterministic topological order."""

    name: str
    graph: nx.DiGraph
    beams: tuple[BeamGroup, ...]
    order: tuple[str, ...]
    spawns: frozenset[str] = frozenset()  # nodes that start a sub-agent fresh (``spawn: true``)
    #: context parents and ancestors by node, found once (the graph does not change; a
    #: simulation of a thousand mid-life sessions asked half a million times)
    _context: dict[tuple[str, str], Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without what was found (``_context``): a template shipped to Ray workers stays
        its own size (a Claude Code topology's memo is ten times the template)."""
        state = dict(self.__dict__)
        state["_context"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)

    def role(self, node: str) -> str:
        return str(self.graph.nodes[node]["role"])

    def canonical(self) -> dict[str, object]:
        """The template as plain sorted data (for a digest of what shapes the traffic)."""
        g = self.graph
        return {
            "name": self.name,
            "nodes": sorted([n, sorted(a.items())] for n, a in g.nodes(data=True)),
            "edges": sorted([u, v, sorted(a.items())] for u, v, a in g.edges(data=True)),
            "beams": [[b.name, list(b.candidates), list(b.scorers), b.keep] for b in self.beams],
            "order": list(self.order),
        }

    def context_parents(self, node: str) -> list[str]:
        found = self._context.get(("parents", node))
        if found is None:
            g = self.graph
            found = self._context[("parents", node)] = tuple(
                p for p in g.predecessors(node) if g.edges[p, node]["kind"] == "context"
            )
        return list(found)

    def after_parents(self, node: str) -> list[str]:
        return [p for p in self.graph.predecessors(node) if self.graph.edges[p, node]["kind"] == "after"]

    def fresh_context(self, node: str) -> bool:
        """Whether the node's prompt carries no ancestor turns (rendered afresh per call)."""
        return bool(self.graph.nodes[node].get("fresh_context"))

    def gate(self, node: str) -> str | None:
        gate: str | None = self.graph.nodes[node].get("gate")
        return gate

    def run_index(self) -> RunIndex:
        """What every run of this template starts from, found once and shared by its runs (ten
        thousand agents of a tree of thought held a copy each: 10 KB per agent)."""
        found = self._context.get(("run", ""))
        if found is None:
            member_of: dict[str, list[str]] = {}
            for g in self.beams:
                for m in dict.fromkeys((*g.candidates, *g.scorers)):
                    member_of.setdefault(m, []).append(g.name)
            gated: dict[str, list[str]] = {}
            for n in self.order:
                if gate := self.gate(n):
                    gated.setdefault(gate, []).append(n)
            found = self._context[("run", "")] = RunIndex(
                deps={n: self.graph.in_degree(n) + (1 if self.gate(n) else 0) for n in self.order},
                groups={g.name: g for g in self.beams},
                member_of={m: tuple(names) for m, names in member_of.items()},
                gated={g: tuple(nodes) for g, nodes in gated.items()},
                members={g.name: len(set((*g.candidates, *g.scorers))) for g in self.beams},
            )
        return found

    def context_ancestors(self, node: str) -> list[str]:
        """Every node whose turn is in ``node``'s prompt, in topological order."""
        found = self._context.get(("ancestors", node))
        if found is None:
            seen: set[str] = set()
            stack = self.context_parents(node)
            while stack:
                n = stack.pop()
                if n not in seen:
                    seen.add(n)
                    stack.extend(self.context_parents(n))
            found = self._context[("ancestors", node)] = tuple(n for n in self.order if n in seen)
        return list(found)


class _Builder:
    def __init__(self) -> None:
        self.g = nx.DiGraph()
        self.beams: list[BeamGroup] = []

    def node(self, name: str, role: str, depth: int, branch: int = 0, **attrs: Any) -> str:
        self.g.add_node(name, role=role, depth=depth, branch=branch, **attrs)
        return name

    def link(self, parent: str, child: str, kind: str = "context") -> None:
        self.g.add_edge(parent, child, kind=kind)


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TreeOfThoughtParams(_Params):
    branching: int = Field(default=3, ge=1, le=10, description="thoughts proposed from each kept thought")
    depth: int = Field(default=3, ge=1, le=8, description="levels of thoughts below the plan")
    evaluate: bool = Field(default=True, description="an evaluate call scores each thought")
    beam_width: int = Field(default=2, ge=1, le=64, description="thoughts kept per level")
    restate_path: bool = Field(
        default=False,
        description="each call's prompt is rendered afresh (system prompt, task, its own instruction "
        "restating the path) instead of carrying its ancestors' turns, as template-driven tree "
        "searches send it: calls share only the system prompt and the task",
    )


class BeamParams(_Params):
    width: int = Field(default=2, ge=1, le=64, description="candidates kept per step")
    branching: int = Field(default=3, ge=1, le=10, description="candidates proposed per kept one")
    steps: int = Field(default=3, ge=1, le=8, description="expansion steps")


class GraphOfThoughtParams(_Params):
    fanout: int = Field(default=4, ge=2, le=16, description="thoughts per fan-out")
    levels: int = Field(default=2, ge=1, le=6, description="fan-out + aggregate rounds")
    refine: bool = Field(default=True, description="a refine call after each aggregate")


class DebateParams(_Params):
    agents: int = Field(default=3, ge=2, le=16, description="debaters")
    rounds: int = Field(default=3, ge=1, le=10, description="rounds; each sees all previous turns")


class MapReduceParams(_Params):
    chunks: int = Field(default=8, ge=1, le=128, description="map calls")


class ReactParams(_Params):
    steps: int = Field(default=4, ge=1, le=32, description="tool calls in the chain")


class ChainParams(_Params):
    length: int = Field(default=4, ge=1, le=64, description="calls in sequence (the last answers)")


def _tree(name: str, branching: int, depth: int, evaluate: bool, keep: int, restate: bool = False) -> _Builder:
    levels_total = sum(branching**level for level in range(1, depth + 1))
    if levels_total * (2 if evaluate else 1) > MAX_TEMPLATE_NODES:
        raise ValueError(
            f"branching**depth is too large ({levels_total} thoughts; limit {MAX_TEMPLATE_NODES})"
        )
    b = _Builder()
    frontier = [b.node("t", "plan", 0)]
    previous_group: str | None = None
    for level in range(1, depth + 1):
        candidates: list[str] = []
        scorers: list[str] = []
        for parent in frontier:
            for i in range(branching):
                child = b.node(f"{parent}.{i}", "expand", level, i)
                if previous_group:
                    b.g.nodes[child]["gate"] = previous_group
                b.link(parent, child)
                candidates.append(child)
                if evaluate:
                    scorer = b.node(f"{child}/eval", "evaluate", level, i)
                    b.link(child, scorer)
                    scorers.append(scorer)
        group = f"level{level}"
        b.beams.append(BeamGroup(group, tuple(candidates), tuple(scorers), keep))
        previous_group = group
        frontier = candidates
    answer = b.node("answer", "answer", depth + 1)
    b.g.nodes[answer]["gate"] = previous_group
    for leaf in frontier:
        b.link(leaf, answer)
    if restate:  # only when set: other trees keep their digest
        for n in b.g.nodes:
            b.g.nodes[n]["fresh_context"] = True
    return b


def build_tree_of_thought(p: TreeOfThoughtParams) -> _Builder:
    return _tree("tree_of_thought", p.branching, p.depth, p.evaluate, p.beam_width, p.restate_path)


def build_beam(p: BeamParams) -> _Builder:
    return _tree("beam", p.branching, p.steps, False, p.width)


def build_graph_of_thought(p: GraphOfThoughtParams) -> _Builder:
    b = _Builder()
    current = b.node("g", "plan", 0)
    depth = 0
    for level in range(1, p.levels + 1):
        thoughts = []
        for i in range(p.fanout):
            t = b.node(f"g{level}.{i}", "expand", depth + 1, i)
            b.link(current, t)
            thoughts.append(t)
        agg = b.node(f"g{level}.agg", "aggregate", depth + 2)
        for t in thoughts:
            b.link(t, agg)
        current, depth = agg, depth + 2
        if p.refine:
            current = b.node(f"g{level}.refine", "expand", depth + 1)
            b.link(agg, current)
            depth += 1
    answer = b.node("answer", "answer", depth + 1)
    b.link(current, answer)
    return b


def build_debate(p: DebateParams) -> _Builder:
    b = _Builder()
    earlier: list[str] = []
    for r in range(1, p.rounds + 1):
        this_round = []
        for a in range(p.agents):
            n = b.node(f"r{r}.a{a}", "debate", r - 1, a)
            for prev in earlier:
                b.link(prev, n)
            this_round.append(n)
        earlier += this_round
    judge = b.node("judge", "answer", p.rounds)
    for n in earlier:
        b.link(n, judge)
    return b


def build_map_reduce(p: MapReduceParams) -> _Builder:
    b = _Builder()
    split = b.node("split", "plan", 0)
    reduce = b.node("reduce", "reduce", 2)
    for i in range(p.chunks):
        m = b.node(f"map{i}", "map", 1, i)
        b.link(split, m)
        b.link(m, reduce)
    return b


def build_react(p: ReactParams) -> _Builder:
    b = _Builder()
    current = b.node("think", "think", 0)
    depth = 0
    for i in range(1, p.steps + 1):
        call = b.node(f"call{i}", "tool_call", depth + 1, tool_after=True)
        b.link(current, call)
        obs = b.node(f"obs{i}", "tool_result", depth + 2)
        b.link(call, obs)
        current, depth = obs, depth + 2
    answer = b.node("answer", "answer", depth + 1)
    b.link(current, answer)
    return b


def build_chain(p: ChainParams) -> _Builder:
    b = _Builder()
    prev: str | None = None
    for i in range(p.length):
        role = "answer" if i == p.length - 1 else ("plan" if i == 0 else "expand")
        n = b.node(f"c{i}", role, i)
        if prev:
            b.link(prev, n)
        prev = n
    return b


GENERATORS: dict[str, tuple[type[_Params], Any]] = {
    "tree_of_thought": (TreeOfThoughtParams, build_tree_of_thought),
    "beam": (BeamParams, build_beam),
    "graph_of_thought": (GraphOfThoughtParams, build_graph_of_thought),
    "debate": (DebateParams, build_debate),
    "map_reduce": (MapReduceParams, build_map_reduce),
    "react": (ReactParams, build_react),
    "chain": (ChainParams, build_chain),
}


class GraphNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    role: str = Field(description=f"one of: {', '.join(ROLES)}")
    tool_after: bool = Field(default=False, description="a tool runs after this call")
    spawn: bool = Field(
        default=False,
        description="a sub-agent started fresh: its prompt, and its context descendants', carries a "
        "task of its own instead of the agent's (link it to its spawner with kind: after)",
    )

    @model_validator(mode="after")
    def _role(self) -> GraphNode:
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r} (known: {', '.join(ROLES)})")
        return self


class GraphLink(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    target: str
    kind: Literal["context", "after"] = "context"


class GraphBeam(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    candidates: list[str] = Field(min_length=1)
    scorers: list[str] = Field(default_factory=list)
    keep: int = Field(ge=1)
    gated: list[str] = Field(default_factory=list, description="nodes that wait for this decision")


class ExplicitGraph(BaseModel):
    """networkx node-link form: ``nodes`` with ids and roles, ``links`` source -> target."""

    model_config = ConfigDict(extra="forbid")

    directed: bool = True
    multigraph: bool = False
    graph: dict[str, Any] = Field(default_factory=dict)
    nodes: list[GraphNode] = Field(min_length=1)
    links: list[GraphLink] = Field(default_factory=list)
    beams: list[GraphBeam] = Field(default_factory=list)


class TopologyFile(BaseModel):
    """One ``topologies/*.yaml`` file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="name used in specs and traces")
    description: str = ""
    synthetic: bool = Field(default=False, description="made up rather than taken from a recording or study")
    source: str = Field(default="", description="the recording or study its shape comes from")
    generator: str | None = Field(default=None, description=f"one of: {', '.join(GENERATORS)}")
    params: dict[str, Any] = Field(default_factory=dict, description="the generator's parameters")
    graph: ExplicitGraph | None = Field(default=None, description="an explicit DAG instead of a generator")

    @model_validator(mode="after")
    def _one_source(self) -> TopologyFile:
        if (self.generator is None) == (self.graph is None):
            raise ValueError("give either 'generator' (with 'params') or 'graph'")
        if self.generator is not None and self.generator not in GENERATORS:
            raise ValueError(f"unknown generator {self.generator!r} (known: {', '.join(GENERATORS)})")
        return self


def _explicit(graph: ExplicitGraph, source: str) -> _Builder:
    if not graph.directed or graph.multigraph:
        raise InputError(f"{source}: graph: must be directed and not a multigraph")
    b = _Builder()
    for i, node in enumerate(graph.nodes):
        if node.id in b.g:
            raise InputError(f"{source}: graph.nodes.{i}.id: duplicate node id {node.id!r}")
        extra = {"spawn": True} if node.spawn else {}  # only when set: older graphs keep their digest
        b.node(node.id, node.role, 0, 0, tool_after=node.tool_after, **extra)
    for i, link in enumerate(graph.links):
        for end in ("source", "target"):
            if getattr(link, end) not in b.g:
                raise InputError(f"{source}: graph.links.{i}.{end}: unknown node {getattr(link, end)!r}")
        b.link(link.source, link.target, link.kind)
    for i, node in enumerate(graph.nodes):
        if node.spawn and any(b.g.edges[p, node.id]["kind"] == "context" for p in b.g.predecessors(node.id)):
            raise InputError(
                f"{source}: graph.nodes.{i}: spawn node {node.id!r} starts fresh, so it has no context "
                "parents: link its parents with kind: after"
            )
    for i, beam in enumerate(graph.beams):
        for part in ("candidates", "scorers", "gated"):
            for n in getattr(beam, part):
                if n not in b.g:
                    raise InputError(f"{source}: graph.beams.{i}.{part}: unknown node {n!r}")
        for n in beam.gated:
            b.g.nodes[n]["gate"] = beam.name
        b.beams.append(BeamGroup(beam.name, tuple(beam.candidates), tuple(beam.scorers), beam.keep))
    return b


def _finish(name: str, b: _Builder, source: str, explicit: bool) -> TopologyTemplate:
    g = b.g
    if not nx.is_directed_acyclic_graph(g):
        cycle = nx.find_cycle(g)
        path = " -> ".join([str(e[0]) for e in cycle] + [str(cycle[0][0])])
        raise InputError(f"{source}: graph.links: cycle {path}")
    index = {n: i for i, n in enumerate(g.nodes)}
    order = tuple(nx.lexicographical_topological_sort(g, key=lambda n: index[n]))
    if explicit:  # depth = longest context path from a source; branch = index among siblings
        for n in order:
            parents = [p for p in g.predecessors(n) if g.edges[p, n]["kind"] == "context"]
            g.nodes[n]["depth"] = max((g.nodes[p]["depth"] + 1 for p in parents), default=0)
        for n in order:
            kids = [c for c in g.successors(n) if g.edges[n, c]["kind"] == "context"]
            for i, c in enumerate(kids):
                g.nodes[c]["branch"] = i
    for group in b.beams if explicit else ():
        for gated in [n for n in g.nodes if g.nodes[n].get("gate") == group.name]:
            members = set(group.candidates) | set(group.scorers)
            if gated in members or any(m in nx.descendants(g, gated) for m in members):
                raise InputError(
                    f"{source}: beams.{group.name}: node {gated!r} cannot wait for its own ancestors' decision"
                )
    spawns = frozenset(n for n in g.nodes if g.nodes[n].get("spawn"))
    return TopologyTemplate(name=name, graph=g, beams=tuple(b.beams), order=order, spawns=spawns)


def build_topology(spec: TopologyFile, source: str = "<topology>") -> TopologyTemplate:
    """Validate a topology spec and build its template; errors name ``source`` and the field."""
    if spec.graph is not None:
        return _finish(spec.name, _explicit(spec.graph, source), source, explicit=True)
    assert spec.generator is not None
    params_model, builder = GENERATORS[spec.generator]
    try:
        params = params_model.model_validate(spec.params)
    except ValidationError as exc:
        raise InputError(
            format_validation_error(f"{source}: params", exc).replace(": params: ", ": params.")
        ) from None
    try:
        b = builder(params)
    except ValueError as exc:
        raise InputError(f"{source}: params: {exc}") from None
    return _finish(spec.name, b, source, explicit=False)


def load_topology(path: str | Path) -> TopologyTemplate:
    spec = validate(TopologyFile, load_yaml(path), str(path))
    return build_topology(spec, str(path))


def render_ascii(template: TopologyTemplate, max_lines: int = 60) -> str:
    """An indented tree of the template (context edges; nodes with several parents marked)."""
    g = template.graph
    lines: list[str] = []
    roots = [n for n in template.order if not template.context_parents(n)]
    seen: set[str] = set()

    def walk(n: str, prefix: str, last: bool, top: bool) -> None:
        if len(lines) >= max_lines:
            return
        parents = template.context_parents(n)
        extra = f" <- {len(parents)} parents" if len(parents) > 1 else ""
        gate = f" [waits for {template.gate(n)}]" if template.gate(n) else ""
        tool = " [then a tool runs]" if g.nodes[n].get("tool_after") else ""
        branch = "" if top else ("└─ " if last else "├─ ")
        again = " (shown above)" if n in seen else ""
        lines.append(f"{prefix}{branch}{n} ({template.role(n)}){extra}{gate}{tool}{again}")
        if n in seen:
            return
        seen.add(n)
        kids = [c for c in g.successors(n) if g.edges[n, c]["kind"] == "context"]
        for i, c in enumerate(kids):
            walk(c, prefix + ("" if top else ("   " if last else "│  ")), i == len(kids) - 1, False)

    for r in roots:
        walk(r, "", True, True)
    if len(lines) >= max_lines:
        lines.append(f"... ({g.number_of_nodes()} nodes in all)")
    for group in template.beams:
        lines.append(f"beam {group.name}: keep {group.keep} of {len(group.candidates)} candidates")
    return "\n".join(lines)
