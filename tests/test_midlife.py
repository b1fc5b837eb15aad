"""Sessions started mid-life (``start_at: mid``): each session starts at a sampled point of its
calls with its history in the prompt, after one warm-up call that re-sends that history; the
warm-up is marked in the trace and left out of every headline figure. Sent to the emulator with
an unbounded cache, one request in flight: what the engine reuses equals the ideal, request for
request, and the ideal counts the history the warm-up put in the cache."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sending import sent_to_unbounded as sent

from swarm.emulator.http_server import EmulatorThread
from swarm.record import RequestRecord
from swarm.runtime.context import ResolvedTarget
from swarm.shape.table import table_from_spec
from swarm.workload.arrival import ArrivalSpec
from swarm.workload.catalog import Catalog
from swarm.workload.workload import MixEntry, Workload, WorkloadSpec

PROFILE = """
name: long
system_prompt: {style: prose, tokens: 120}
task_tokens: {dist: constant, value: 30}
instruction_tokens: {dist: constant, value: 6}
output_tokens:
  default: {dist: constant, value: 40}
think_time_s: {dist: constant, value: 0}
tool_time_s: {dist: constant, value: 0.001}
tool_result_tokens: {dist: constant, value: 50}
"""

# a thread of eight tool calls, a sub-agent of two calls spawned after the fourth, then an answer
THREAD = """
name: thread
graph:
  nodes:
    - {id: a0, role: tool_call, tool_after: true}
    - {id: a1, role: tool_call, tool_after: true}
    - {id: a2, role: tool_call, tool_after: true}
    - {id: a3, role: tool_call, tool_after: true}
    - {id: s0, role: tool_call, tool_after: true, spawn: true}
    - {id: s1, role: answer}
    - {id: a4, role: tool_call, tool_after: true}
    - {id: a5, role: tool_call, tool_after: true}
    - {id: a6, role: tool_call, tool_after: true}
    - {id: a7, role: answer}
  links:
    - {source: a0, target: a1}
    - {source: a1, target: a2}
    - {source: a2, target: a3}
    - {source: a3, target: s0, kind: after}
    - {source: s0, target: s1}
    - {source: a3, target: a4}
    - {source: s1, target: a4, kind: after}
    - {source: a4, target: a5}
    - {source: a5, target: a6}
    - {source: a6, target: a7}
"""


@pytest.fixture
def files(tmp_path: Path) -> Path:
    folder = tmp_path / "defs"
    folder.mkdir()
    (folder / "long.yaml").write_text(PROFILE)
    (folder / "thread.yaml").write_text(THREAD)
    return folder


@pytest.fixture
def catalog(files: Path) -> Catalog:
    return Catalog(agent_dirs=[files], topology_dirs=[files])


def workload(catalog: Catalog, start_at: str, agents: int = 8, topology: str = "thread") -> Workload:
    spec = WorkloadSpec(
        agents=agents, mix=[MixEntry(profile="long", topology=topology)],
        arrival=ArrivalSpec(process="all_at_once", rate=None), system_prompts=1, start_at=start_at,  # type: ignore[arg-type]
    )  # fmt: skip
    return Workload(spec, catalog)


def test_history_is_sampled_between_the_start_ratios_and_is_the_same_for_every_reading(
    catalog: Catalog,
) -> None:
    wl = workload(catalog, "mid", agents=40)
    starts = [len(wl.agent(a).history) for a in range(40)]
    order = wl.agent(0).topology.order
    assert all(int(0.25 * len(order)) <= k <= int(0.75 * len(order)) for k in starts)
    assert len(set(starts)) > 1
    assert starts == [len(workload(catalog, "mid", agents=40).agent(a).history) for a in range(40)]
    for a in range(40):
        assert wl.agent(a).history == tuple(order[: starts[a]])
    assert all(not workload(catalog, "begin").agent(a).history for a in range(8))
    # a spec that leaves the option at its default hashes as before the option existed
    assert workload(catalog, "begin").traffic_hash() != wl.traffic_hash()


def test_which_agents_start_mid_life_beams_start_whole_and_the_workload_overrides_its_entries(
    catalog: Catalog,
) -> None:
    """An entry's start_at applies to its agents unless the workload's is set (``--start-at``);
    a topology with beam groups starts whole: its keep-or-cut needs calls a history never made."""
    mixed = WorkloadSpec(
        agents=12, system_prompts=1,
        mix=[MixEntry(profile="long", topology="thread", start_at="mid"), MixEntry(profile="long", topology="chain")],
    )  # fmt: skip
    wl = Workload(mixed, catalog)
    kinds = {wl.agent(a).topology.name: bool(wl.agent(a).history) for a in range(12)}
    assert kinds == {"thread": True, "chain": False}
    assert all(wl.starts_mid(a) == bool(wl.agent(a).history) for a in range(12))
    for forced, expected in (("begin", False), ("mid", True)):
        wl = Workload(mixed.model_copy(update={"start_at": forced}), catalog)
        assert {bool(wl.agent(a).history) for a in range(12)} == {expected}
        assert {wl.starts_mid(a) for a in range(12)} == {expected}
    beams = workload(catalog, "mid", topology="tree_of_thought")
    assert beams.agent(0).topology.beams and not any(beams.agent(a).history for a in range(8))


def test_mid_life_sessions_send_a_warm_up_then_reuse_their_history_exactly(
    catalog: Catalog, emulator: Callable[..., EmulatorThread]
) -> None:
    wl = workload(catalog, "mid")
    records = sent(wl, emulator)
    mismatched = [
        (r.identity.session_id, r.identity.node, r.cached_tokens, r.ideal_cached_tokens_est)
        for r in records
        if r.cached_tokens != r.ideal_cached_tokens_est
    ]
    assert mismatched == []
    # block hashes carried on from the prompt a call extends are those of its whole prompt
    from swarm.workload.prefix import block_hashes

    for r in records:
        assert r.prompt_parts is not None
        assert r.block_hashes == block_hashes([w for part in r.prompt_parts for w in part.split()])
    warmups = [r for r in records if r.identity.warmup]
    normal = [r for r in records if not r.identity.warmup]
    by_session: dict[str, list[RequestRecord]] = {}
    for r in normal:
        by_session.setdefault(r.identity.session_id, []).append(r)
    for a in range(8):
        plan = wl.agent(a)
        history = set(plan.history)
        mine = by_session[plan.session_id]
        # the history is never sent as such; every later node is, once
        assert {r.identity.node for r in mine} == set(plan.topology.order) - history
        t = plan.topology
        # one warm-up per thread the start cuts into: each history node a later node extends
        cut = {p for c in t.order if c not in history for p in t.context_parents(c) if p in history}
        warm = {r.identity.node: r for r in warmups if r.identity.session_id == plan.session_id}
        assert set(warm) == cut
        for node, w in warm.items():
            assert w.max_tokens == 1 and w.identity.request_id.endswith(":warmup")
            # the call after the start reuses all the warm-up sent: the thread's history
            nxt = next(r for r in mine if node in r.identity.parent_nodes)
            assert (nxt.cached_tokens or 0) >= (w.prompt_tokens or 0) > 0
            assert (nxt.prompt_tokens or 0) > (w.prompt_tokens or 0)
        assert any((w.prompt_tokens or 0) > 300 for w in warm.values())
    # sent from the beginning instead, the same sessions send every node and no warm-up
    begin = sent(workload(catalog, "begin"), emulator)
    assert not any(r.identity.warmup for r in begin)
    assert len(begin) == 8 * 10 and len(normal) < len(begin)


def test_the_offline_reading_counts_the_warm_up_in_the_ideal_but_not_as_a_row(files: Path) -> None:
    spec = WorkloadSpec(
        agents=6, mix=[MixEntry(profile=str(files / "long.yaml"), topology=str(files / "thread.yaml"))],
        system_prompts=1, start_at="mid",
    )  # fmt: skip
    wl = Workload(spec)
    table = table_from_spec(spec, "spec")
    begin = table_from_spec(spec.model_copy(update={"start_at": "begin"}), "spec")
    sessions, whole = table.sessions(), begin.sessions()
    for a in range(6):
        plan = wl.agent(a)
        assert plan.history
        rows = [table.rows[i] for i in sessions[plan.session_id]]
        full = [begin.rows[i] for i in whole[plan.session_id]][len(plan.history) :]
        # the calls after the start are those of the whole session, and so is their ideal:
        # the warm-up put the history in the cache as the skipped calls would have
        assert [(r.prompt_tokens, r.ideal_cached_tokens) for r in rows] == [
            (r.prompt_tokens, r.ideal_cached_tokens) for r in full
        ]
    assert len(table.rows) < len(begin.rows)


def test_warm_up_rows_are_marked_in_the_trace_and_left_out_of_the_report(
    files: Path, emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    import json

    from typer.testing import CliRunner

    from swarm.cli import app
    from swarm.trace.reader import read_requests

    emu = emulator(engine="sglang", timing="zero")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "workload:\n  agents: 5\n  system_prompts: 1\n  start_at: mid\n  arrival: {process: all_at_once}\n"
        f"  mix: [{{profile: {files / 'long.yaml'}, topology: {files / 'thread.yaml'}}}]\n"
    )
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app,
        ["run", "--spec", str(spec), "--target", f"t={emu.url}", "--executor", "inprocess",
         "--no-progress", "--output", str(runs)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    rows = read_requests(run_dir, ["warmup", "max_tokens", "status"]).to_pylist()
    warm = [r for r in rows if r["warmup"]]
    assert len(warm) >= 5 and all(r["max_tokens"] == 1 for r in warm)
    report = CliRunner().invoke(app, ["report", str(run_dir), "--json"])
    assert report.exit_code == 0, report.output
    data = json.loads(report.output)
    assert data["targets"]["t"]["figures"]["requests"] == len(rows) - len(warm)
    assert any(f"{len(warm)} warm-up calls" in w for w in data["warnings"])
    # a replay of the run rebuilds every prompt exactly (history nodes have no rows) and keeps
    # its warm-ups marked
    from swarm.replay.from_run import plan_from_run
    from swarm.workload.prefix import block_hashes

    plan = plan_from_run(str(run_dir))
    recorded = {
        r["request_id"]: r
        for r in read_requests(run_dir, ["request_id", "block_hashes", "warmup"]).to_pylist()
    }
    assert len(plan.items) == len(rows)
    for item in plan.items:
        row = recorded[item.identity.request_id]
        assert item.identity.warmup == bool(row["warmup"])
        assert item.prompt_parts is not None
        words = [w for part in item.prompt_parts for w in part.split()]
        assert list(block_hashes(words)) == list(row["block_hashes"]), item.identity.request_id


def test_a_replay_started_mid_life_warms_up_then_reuses_its_history_exactly(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    """Two recorded Claude Code sessions replayed in dependent mode, each from a sampled point:
    its calls before it dropped, the one the next call extends re-sent as a warm-up first."""
    from claude_code_data import unpack
    from sending import send_replay

    from swarm.replay.formats import import_trace

    plan = import_trace(unpack(tmp_path / "s", ["trace_0021.json", "trace_0022.json"]), "agentic_coding")
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")
    records, _ = send_replay(plan, target, mode="dependent", speed=1e6, max_in_flight=1, start_ratios=(0.25, 0.75))
    assert records and all(r.ok for r in records)
    assert [r for r in records if r.cached_tokens != r.ideal_cached_tokens_est] == []
    warm = [r for r in records if r.identity.warmup]
    normal = [r for r in records if not r.identity.warmup]
    assert len(warm) == 2 and all(r.max_tokens == 1 for r in warm)
    assert 0.25 * len(plan.items) - 2 <= len(plan.items) - len(normal) <= 0.75 * len(plan.items)
    for w in warm:  # the next call of its session reuses the whole warm-up prompt
        session = [r for r in normal if r.identity.session_id == w.identity.session_id]
        first = min(session, key=lambda r: r.sent_ns)
        assert first.sent_ns > w.sent_ns and (first.cached_tokens or 0) >= (w.prompt_tokens or 0) - 64
        assert (w.prompt_tokens or 0) > 15_000
    with pytest.raises(ValueError, match="dependent"):
        send_replay(plan, target, mode="timed", start_ratios=(0.25, 0.75))
