"""The swarm on one machine: determinism, structure, prefix sharing, and cache accounting."""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path

import pytest
from sending import send_agents

from swarm.emulator.http_server import EmulatorThread
from swarm.record import RequestRecord, Status
from swarm.runtime.context import ResolvedTarget
from swarm.runtime.sources import SendLimits
from swarm.texts import as_str
from swarm.workload.arrival import ArrivalSpec
from swarm.workload.catalog import Catalog
from swarm.workload.workload import MixEntry, Workload, WorkloadSpec, partition

TINY = """
name: tiny
system_prompt: {style: prose, tokens: 120}
task_tokens: {dist: uniform, low: 20, high: 40}
instruction_tokens: {dist: uniform, low: 4, high: 9}
output_tokens:
  default: {dist: uniform, low: 3, high: 9}
  evaluate: {dist: constant, value: 2}
think_time_s: {dist: constant, value: 0}
tool_time_s: {dist: constant, value: 0.001}
tool_result_tokens: {dist: constant, value: 12}
"""

TOPOLOGIES = [
    "tree_of_thought",
    "beam",
    "graph_of_thought",
    "debate",
    "map_reduce",
    "react",
    "chain",
    "plan_execute_verify",
]


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    (tmp_path / "tiny.yaml").write_text(TINY)
    return Catalog(agent_dirs=[tmp_path])


def spec(topology: str = "tree_of_thought", agents: int = 12, **kw: object) -> WorkloadSpec:
    return WorkloadSpec(
        agents=agents,
        mix=[MixEntry(profile="tiny", topology=topology)],
        arrival=ArrivalSpec(process="all_at_once", rate=None),
        **kw,  # type: ignore[arg-type]
    )


def run(
    workload: Workload,
    url: str,
    engine: str = "sglang",
    agent_ids: list[int] | None = None,
    limits: SendLimits | None = None,
) -> list[RequestRecord]:
    target = ResolvedTarget("t", url, engine, "openai-chat", "m")
    return send_agents(workload, target, agent_ids, limits)


def test_same_spec_and_seed_give_identical_plans(catalog: Catalog) -> None:
    a, b = Workload(spec(agents=50), catalog), Workload(spec(agents=50), catalog)
    assert list(a.start_offsets_s) == list(b.start_offsets_s)
    for i in (0, 7, 49):
        pa_, pb = a.agent(i), b.agent(i)
        assert (pa_.system_prompt, pa_.task, pa_.system_prompt_id) == (
            pb.system_prompt,
            pb.task,
            pb.system_prompt_id,
        )
        # built in a different order, the node plans are the same
        names = list(pa_.topology.order)
        assert [pa_.node(n) for n in names] == [pb.node(n) for n in reversed(names)][::-1]
    other = Workload(spec(agents=50, seed=1), catalog)
    assert other.agent(0).task != a.agent(0).task


def test_arrival_schedule_is_seeded(catalog: Catalog) -> None:
    s = spec(agents=100)
    s.arrival = ArrivalSpec(process="poisson", rate=10)
    assert list(Workload(s, catalog).start_offsets_s) == list(Workload(s, catalog).start_offsets_s)


def key(r: RequestRecord) -> tuple:  # type: ignore[type-arg]
    return (
        r.identity.session_id,
        r.identity.node,
        r.identity.parent_nodes,
        r.block_hashes,
        r.prompt_tokens_est,
    )


def test_any_split_into_groups_sends_byte_identical_prompts(
    catalog: Catalog, emulator: Callable[..., EmulatorThread]
) -> None:
    emu = emulator(engine="sglang", timing="zero")
    wl = Workload(spec(agents=24), catalog)
    whole = sorted(key(r) for r in run(wl, emu.url))
    for workers in (2, 5):
        parts: list[tuple] = []  # type: ignore[type-arg]
        for ids in partition(wl.n_agents, workers):
            parts += [key(r) for r in run(Workload(spec(agents=24), catalog), emu.url, agent_ids=ids)]
        assert sorted(parts) == whole


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_request_structure_matches_graph_and_siblings_share_parent_context(
    topology: str, catalog: Catalog, emulator: Callable[..., EmulatorThread]
) -> None:
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    wl = Workload(spec(topology, agents=3), catalog)
    records = run(wl, emu.url)
    assert records and all(r.status is Status.OK for r in records)
    template = wl.agent(0).topology
    by_session: dict[str, dict[str, RequestRecord]] = collections.defaultdict(dict)
    for r in records:
        by_session[r.identity.session_id][r.identity.node] = r
    for sid, nodes in by_session.items():
        plan = wl.agent(int(sid.split("-")[1]))
        for name, r in nodes.items():
            parents = set(r.identity.parent_nodes)
            assert parents <= set(template.context_parents(name))
            assert all(p in nodes for p in parents), "a child was sent although its parent was not"
            assert r.identity.role == template.role(name)
            assert r.prompt_parts is not None and r.prompt_parts[-1] == as_str(plan.node(name).instruction)
            parent_end = [nodes[p].sent_ns + (nodes[p].e2e_ns or 0) for p in parents]
            assert all(r.sent_ns >= end for end in parent_end), "child sent before its parent finished"
            if len(template.context_parents(name)) == 1 and parents:
                (p,) = parents
                parent = nodes[p]
                assert parent.prompt_parts is not None
                expected = (*parent.prompt_parts, as_str(plan.node(p).standin))
                if plan.node(p).tool_result is not None:
                    expected = (*expected, as_str(plan.node(p).tool_result))
                assert r.prompt_parts[: len(expected)] == expected
                assert len(r.prompt_parts) == len(expected) + 1
        # siblings of one parent share exactly the parent's context, then differ at once
        kids: dict[str, list[RequestRecord]] = collections.defaultdict(list)
        for name, r in nodes.items():
            if len(r.identity.parent_nodes) == 1 and len(template.context_parents(name)) == 1:
                kids[r.identity.parent_nodes[0]].append(r)
        for p, sibs in kids.items():
            parent = nodes[p]
            assert parent.prompt_parts is not None and parent.prompt_tokens is not None
            context_tokens = sum(len(x.split()) for x in parent.prompt_parts) + len(
                as_str(plan.node(p).standin).split()
            )
            if plan.node(p).tool_result is not None:
                context_tokens += len(as_str(plan.node(p).tool_result).split())  # type: ignore[arg-type]
            for a in sibs:
                for b in sibs:
                    if a is b:
                        continue
                    ta = " ".join(a.prompt_parts or ()).split()
                    tb = " ".join(b.prompt_parts or ()).split()
                    common = next(
                        (i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y),
                        min(len(ta), len(tb)),
                    )
                    assert common == context_tokens


@pytest.mark.parametrize("topology", ["tree_of_thought", "graph_of_thought", "debate", "react"])
def test_realised_cached_tokens_equal_ideal_with_unbounded_cache(
    topology: str, catalog: Catalog, emulator: Callable[..., EmulatorThread]
) -> None:
    sg = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    trt = emulator(engine="trtllm", timing="zero", cache_capacity_tokens=None)
    # One request in flight: the ideal index and the engine then see prompts in the same order.
    # With several, concurrent siblings may reach the engine in another order than the one the
    # index observed them in (a busy machine), and each request's share moves between them.
    wl = Workload(spec(topology, agents=10, system_prompts=3), catalog)
    records = run(wl, sg.url, limits=SendLimits(max_in_flight=1))
    assert records and all(r.ok for r in records)
    mismatched = [
        (r.identity.node, r.cached_tokens, r.ideal_cached_tokens_est)
        for r in records
        if r.cached_tokens != r.ideal_cached_tokens_est
    ]
    assert mismatched == []
    assert all(r.prompt_tokens == r.prompt_tokens_est for r in records)
    # blocks reuse no more than the ideal, rounded down to whole blocks
    trt_records = run(
        Workload(spec(topology, agents=10, system_prompts=3), catalog),
        trt.url,
        engine="trtllm",
        limits=SendLimits(max_in_flight=1),
    )
    for r in trt_records:
        assert r.cached_tokens is not None and r.ideal_cached_tokens_est is not None
        assert r.cached_tokens <= r.ideal_cached_tokens_est // 32 * 32
    assert sum(r.cached_tokens or 0 for r in trt_records) < sum(r.cached_tokens or 0 for r in records)


def test_beam_keeps_width_per_level(catalog: Catalog, emulator: Callable[..., EmulatorThread]) -> None:
    emu = emulator(engine="sglang", timing="zero")
    wl = Workload(spec("tree_of_thought", agents=4), catalog)  # branching 3, depth 3, beam 2
    records = run(wl, emu.url)
    per_session = collections.Counter(
        (r.identity.session_id, r.identity.depth, r.identity.role) for r in records
    )
    for sid in {r.identity.session_id for r in records}:
        assert per_session[(sid, 1, "expand")] == 3
        assert per_session[(sid, 2, "expand")] == 6  # 2 kept x 3
        assert per_session[(sid, 3, "expand")] == 6
        assert per_session[(sid, 4, "answer")] == 1
    answers = [r for r in records if r.identity.role == "answer"]
    assert all(len(r.identity.parent_nodes) == 2 for r in answers)  # the 2 kept final thoughts


def test_a_beam_whose_candidates_failed_keeps_its_best_answered_ones(
    catalog: Catalog, emulator: Callable[..., EmulatorThread]
) -> None:
    """A failed call aborts its branch (``on_failure: abort_branch``): its beam decides once
    every candidate answered or failed, keeping up to its width of the best scored of those
    that answered, and the next level expands those (no level waits for ever on a dead
    candidate)."""
    from swarm.emulator.faults import FaultSpec

    emu = emulator(engine="sglang", timing="zero", faults=FaultSpec.parse("http_500=0.3,seed=5"))
    wl = Workload(spec("tree_of_thought", agents=12), catalog)  # branching 3, depth 3, beam 2
    records = run(wl, emu.url)
    outcome: dict[tuple[str, int, str], bool] = {}  # each thought's, over its attempts (retries)
    for r in records:
        if r.identity.role not in ("expand", "answer"):  # the evaluate calls score, not kept
            continue
        key = (r.identity.session_id, r.identity.depth, r.identity.node)
        outcome[key] = outcome.get(key, False) or r.ok
    sent: collections.Counter[tuple[str, int]] = collections.Counter()
    answered: collections.Counter[tuple[str, int]] = collections.Counter()
    for (sid, depth, _), ok in outcome.items():
        sent[(sid, depth)] += 1
        answered[(sid, depth)] += ok
    # the thoughts each level expanded: the two best scored of the level before's answered
    agent_of = {r.identity.session_id: r.identity.agent_id for r in records}
    expanded: dict[tuple[str, int], set[str]] = collections.defaultdict(set)
    for r in records:
        if r.identity.role == "expand" and r.identity.depth > 1:
            expanded[(r.identity.session_id, r.identity.depth - 1)].update(r.identity.parent_nodes)
    for (sid, depth, _), _ok in outcome.items():
        if depth in (1, 2):
            plan = wl.agent(agent_of[sid])
            alive = [n for (s, d, n), ok in outcome.items() if s == sid and d == depth and ok]
            best = sorted(alive, key=lambda n: plan.node(n).score, reverse=True)[:2]
            assert expanded[(sid, depth)] == set(best), (sid, depth)
    sessions = {r.identity.session_id for r in records}
    partial = 0
    for sid in sessions:
        for depth in (1, 2):
            alive = answered[(sid, depth)]
            partial += 0 < alive < sent[(sid, depth)]
            assert sent[(sid, depth + 1)] == 3 * min(2, alive), (sid, depth)
        assert sent[(sid, 4)] == (answered[(sid, 3)] > 0)  # the answer, if a final thought stands
    assert partial >= 3  # levels where some candidates failed and the others went on


def test_in_flight_cap_and_request_limit(catalog: Catalog, emulator: Callable[..., EmulatorThread]) -> None:
    emu = emulator(engine="sglang", timing="fixed", first_token_ms=5, token_ms=1)
    wl = Workload(spec("map_reduce", agents=6), catalog)
    records = run(wl, emu.url, limits=SendLimits(max_in_flight=3))
    events = sorted(
        [(r.sent_ns, 1) for r in records] + [(r.sent_ns + (r.e2e_ns or 0), -1) for r in records],
        key=lambda e: (e[0], e[1]),
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak <= 3
    assert max(r.queue_ns for r in records) > 1_000_000  # waiting for the cap shows as lateness
    limited = run(Workload(spec("map_reduce", agents=6), catalog), emu.url, limits=SendLimits(max_requests=17))
    assert len(limited) == 17


def test_live_context_feeds_real_outputs(catalog: Catalog, emulator: Callable[..., EmulatorThread]) -> None:
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    records = run(Workload(spec("chain", agents=2, context="live"), catalog), emu.url)
    by = {(r.identity.session_id, r.identity.node): r for r in records}
    child = by[("0-0", "c1")]
    parent = by[("0-0", "c0")]
    assert child.prompt_parts is not None and parent.output_text
    assert child.prompt_parts[-2] == parent.output_text
    # the parent's generated tokens were in the cache, but its last one (sampled, never
    # computed): the child hits them too
    assert child.cached_tokens == (parent.prompt_tokens or 0) + (parent.completion_tokens or 0) - 1


def test_duration_limit_stops_new_agents_and_requests(
    catalog: Catalog, emulator: Callable[..., EmulatorThread]
) -> None:
    emu = emulator(engine="sglang", timing="zero")
    s = spec("chain", agents=50)
    s.arrival = ArrivalSpec(process="constant", rate=10)  # agents at 0.0, 0.1, ..., 4.9 s
    records = run(Workload(s, catalog), emu.url, limits=SendLimits(duration_s=0.45))
    sessions = {r.identity.session_id for r in records}
    assert sessions == {f"0-{i}" for i in range(5)}  # those due before 0.45 s
    # every request was due (and so issued) before the deadline, however late it went out
    first = min(r.scheduled_ns for r in records)
    assert max(r.scheduled_ns for r in records) - first < 0.45e9


def test_topologies_command_draws_a_tree() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "swarm", "topologies", "react"], capture_output=True, text=True, check=True
    )
    assert "call1 (tool_call) [then a tool runs]" in out.stdout
    listing = subprocess.run(
        [sys.executable, "-m", "swarm", "topologies"], capture_output=True, text=True, check=True
    )
    assert "tree_of_thought" in listing.stdout and "debate" in listing.stdout


#: ``tiny`` that compacts its history past 170 tokens (a decision per call, from its length)
TINY_COMPACTING = TINY.replace("name: tiny", "name: tiny_compacting") + """
compaction:
  threshold_tokens: 170
  summary_tokens: {dist: constant, value: 30}
"""


#: ``tiny`` whose prompts are long enough to be built ahead at the default ``SPECULATE_FROM_TOKENS``
TINY_LONG = TINY.replace("name: tiny", "name: tiny_long").replace("tokens: 120}", "tokens: 2100}")


@pytest.mark.parametrize(
    ("profile", "topology"),
    [("tiny", "tree_of_thought"), ("tiny", "react"), ("tiny_compacting", "chain"), ("tiny_long", "chain")],
)
def test_prompts_built_while_the_parent_is_in_flight_are_the_prompts_sent_without(
    profile: str, topology: str, tmp_path: Path, emulator: Callable[..., EmulatorThread],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A child's prompt built ahead, while its parent streams (``context: synthetic``), is
    byte for byte the one built once the parent answered, with the same parents and ideal
    reuse, and its body (encoded ahead) tells the engine the same prompt; and ahead-building
    did happen (with ``SPECULATE_FROM_TOKENS`` at 0: most of these prompts are short). At its
    default, short children are built at the answer, and long ones (``tiny_long``'s system
    prompt of 2,100 tokens) still ahead."""
    import gc

    from swarm.runtime import agent

    (tmp_path / "tiny.yaml").write_text(TINY)
    (tmp_path / "tiny_compacting.yaml").write_text(TINY_COMPACTING)
    (tmp_path / "tiny_long.yaml").write_text(TINY_LONG)
    catalog = Catalog(agent_dirs=[tmp_path])
    emu = emulator(engine="sglang", timing="fixed", first_token_ms=30.0, token_ms=2.0, cache_capacity_tokens=None)
    taken: list[str] = []
    take = agent.AgentRun._take_speculated
    envs: list[agent.AgentEnv] = []
    init = agent.AgentRun.__init__

    def noted(self: agent.AgentRun, plan: object, env: agent.AgentEnv) -> None:
        envs.append(env)
        init(self, plan, env)  # type: ignore[arg-type]

    def counted(self: agent.AgentRun, node: str) -> object:
        built = take(self, node)
        if built is not None:
            taken.append(node)
            # held as ids: nothing in a prompt's tokens for the garbage collector to walk
            held = [built[1], *self.prompts._part_tokens.values()]
            assert not [r for t in held for r in gc.get_referents(t) if not isinstance(r, type)]
        return built

    def sent(budget: int) -> list[tuple]:  # type: ignore[type-arg]
        monkeypatch.setattr(agent, "SPECULATED_TOKENS_BUDGET", budget)
        wl = Workload(WorkloadSpec(agents=3, mix=[MixEntry(profile=profile, topology=topology)]), catalog)
        records = run(wl, emu.url, limits=SendLimits(max_in_flight=1))
        assert records and all(r.ok for r in records)
        return sorted(
            (r.identity.request_id, r.prompt_parts, r.identity.parent_nodes, r.prompt_tokens_est,
             r.ideal_cached_tokens_est, r.prompt_tokens) for r in records
        )  # fmt: skip

    budget = agent.SPECULATED_TOKENS_BUDGET
    monkeypatch.setattr(agent.AgentRun, "_take_speculated", counted)
    monkeypatch.setattr(agent.AgentRun, "__init__", noted)
    without = sent(0)
    assert not taken
    assert sent(budget) == without
    assert bool(taken) == (profile == "tiny_long"), taken  # short prompts: none built ahead
    taken.clear()
    monkeypatch.setattr(agent, "SPECULATE_FROM_TOKENS", 0)
    with_ahead = sent(budget)
    assert with_ahead == without  # the engine counted the same prompt from each body
    assert taken, "no child was built while its parent was in flight"
    assert {e.speculated_tokens for e in envs} == {0}  # every prompt built ahead let go of
    if profile == "tiny_compacting":  # compacted prompts were among them
        assert any(part.startswith("summary ") for r in with_ahead for part in r[1])


#: ``tiny`` whose answers are long synthesised texts (``WordText``s: 256 words or more)
TINY_WORDY = TINY.replace("name: tiny", "name: tiny_wordy").replace(
    "default: {dist: uniform, low: 3, high: 9}", "default: {dist: uniform, low: 300, high: 600}"
)


@pytest.mark.parametrize("topology", ["chain", "tree_of_thought"])
def test_the_ideal_reuse_index_is_told_where_prompts_are_corpus_text(
    topology: str, tmp_path: Path, emulator: Callable[..., EmulatorThread], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent tells the ideal-reuse index where each prompt's tokens are its long texts'
    corpus runs (``SessionPrompts.shared_runs``), and every run it names is the prompt's there (the
    index checks each, and counts one that is not): the long answers are held by reference."""
    from swarm.workload import prefix

    (tmp_path / "tiny_wordy.yaml").write_text(TINY_WORDY)
    catalog = Catalog(agent_dirs=[tmp_path])
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    indexes: list[prefix.PrefixIndex] = []
    init = prefix.PrefixIndex.__init__

    def noted(self: prefix.PrefixIndex) -> None:
        indexes.append(self)
        init(self)

    monkeypatch.setattr(prefix.PrefixIndex, "__init__", noted)
    wl = Workload(WorkloadSpec(agents=3, mix=[MixEntry(profile="tiny_wordy", topology=topology)]), catalog)
    records = run(wl, emu.url)
    assert records and all(r.ok for r in records)
    (index,) = [i for i in indexes if i.tokens_stored]
    assert index.runs_refused == 0
    assert index.tokens_copied < index.tokens_stored / 2  # most of it the answers, referenced
    assert any(r.ideal_cached_tokens_est for r in records)


#: ``tiny`` with each way of carrying reasoning (``extend_messages`` applies to none, all)
TINY_REASONING = {
    carried: TINY.replace("name: tiny", f"name: tiny_reasoning_{carried}")
    + f"reasoning: {{share: 0.5, carried: {carried}}}\n"
    for carried in ("none", "all", "last")
}


@pytest.mark.parametrize(
    ("profile", "topology", "start_at", "extends"),
    [
        ("tiny", "chain", None, True), ("tiny", "tree_of_thought", None, True), ("tiny", "react", None, True),
        ("tiny", "debate", None, False), ("tiny", "map_reduce", None, True),
        ("tiny_reasoning_none", "chain", None, True), ("tiny_reasoning_all", "tree_of_thought", None, True),
        ("tiny_reasoning_last", "chain", None, False), ("tiny_compacting", "chain", None, False),
        ("tiny", "chain", "mid", True), ("tiny_long", "tree_of_thought", None, True),
    ],
)  # fmt: skip
def test_a_prompt_extended_from_its_parents_is_the_prompt_composed_whole(
    profile: str, topology: str, start_at: str | None, extends: bool, tmp_path: Path,
    emulator: Callable[..., EmulatorThread], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A call whose one context parent's prompt is still kept is made from it and the parent's
    turn (``AgentRun._extended_messages``): each such prompt equals ``compose_messages`` of its
    alive ancestors, the run's records are those of a run that composes every prompt whole, and
    the shortcut is taken where the profile allows it (never where it compacts, or strips an
    earlier turn's reasoning but not its direct parent's); after a mid-life session's warm-up,
    and beside prompts built while their parent streams (``tiny_long``'s long system prompt)."""
    from swarm.runtime import agent
    from swarm.workload.prompts import compose_messages

    for name, text in (("tiny", TINY), ("tiny_compacting", TINY_COMPACTING), ("tiny_long", TINY_LONG)):
        (tmp_path / f"{name}.yaml").write_text(text)
    for carried, text in TINY_REASONING.items():
        (tmp_path / f"tiny_reasoning_{carried}.yaml").write_text(text)
    catalog = Catalog(agent_dirs=[tmp_path])
    emu = emulator(engine="sglang", timing="fixed", first_token_ms=5.0, token_ms=1.0, cache_capacity_tokens=None)
    extend = agent.AgentRun._extended_messages
    extended: list[str] = []

    def checked(self: agent.AgentRun, node: str, ancestors: list[str]) -> object:
        messages = extend(self, node, ancestors)
        if messages is not None:
            extended.append(node)
            assert messages == compose_messages(self.plan, node, [(a, self.turns[a]) for a in ancestors])
        return messages

    def sent() -> list[tuple]:  # type: ignore[type-arg]
        mix = [MixEntry(profile=profile, topology=topology, start_at=start_at)]  # type: ignore[arg-type]
        wl = Workload(WorkloadSpec(agents=3, mix=mix), catalog)
        records = run(wl, emu.url, limits=SendLimits(max_in_flight=1))
        assert records and all(r.ok for r in records)
        assert any(r.identity.warmup for r in records) == (start_at == "mid")
        return sorted(
            (r.identity.request_id, r.prompt_parts, r.prompt_roles, r.prompt_tokens_est, r.block_hashes,
             r.ideal_cached_tokens_est, r.prompt_tokens) for r in records
        )  # fmt: skip

    monkeypatch.setattr(agent.AgentRun, "_extended_messages", checked)
    with_extension = sent()
    assert bool(extended) == extends, extended
    monkeypatch.setattr(agent.AgentRun, "_extended_messages", lambda self, node, ancestors: None)
    assert sent() == with_extension
