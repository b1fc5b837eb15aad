"""Replays on the one runtime: on Ray workers, N copies of every session, a closed loop of
sessions, retries, a worker lost, Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from sending import replay_run, send_replay

from swarm.cluster.executor import RayExecutor
from swarm.emulator.faults import FaultSpec
from swarm.emulator.http_server import EmulatorThread
from swarm.launch import execute_run
from swarm.record import RequestIdentity
from swarm.replay.formats import import_trace
from swarm.replay.from_run import plan_from_run
from swarm.replay.plan import ReplayItem, ReplayPlan
from swarm.replay.reading import Filters
from swarm.runtime.agent_source import AgentSource
from swarm.runtime.context import ResolvedTarget
from swarm.runtime.live_stats import RunStats
from swarm.runtime.replay_source import ReplaySource, copy_session, group_sessions, shared_block_ids
from swarm.runtime.sources import SendLimits
from swarm.runtime.specs import RunSpec, TargetSpec
from swarm.trace.manifest import RunManifest
from swarm.trace.reader import read_requests
from swarm.trace.storage import RunStorage
from swarm.workload.arrival import ArrivalSpec
from swarm.workload.workload import MixEntry, Workload, WorkloadSpec

MOONCAKE = Path(__file__).parent / "data" / "mooncake_conversation_first300.jsonl"


@pytest.fixture
def recorded_run(emulator: Callable[..., EmulatorThread], tmp_path: Path) -> str:
    """A small synthetic-context swarm run (built-in profile, beam topology): 8 sessions."""
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    spec = RunSpec(
        workload=WorkloadSpec(
            agents=8,
            mix=[MixEntry(profile="math_reasoner", topology="beam")],
            arrival=ArrivalSpec(process="constant", rate=20),
        ),
        targets=[TargetSpec(name="orig", url=emu.url, engine="sglang")],
        output_dir=str(tmp_path / "runs"),
        executor="inprocess",
    )
    return execute_run(spec).run_dir


def request_rows(run_dir: str) -> dict[str, dict]:  # type: ignore[type-arg]
    return {r["request_id"]: r for r in read_requests(run_dir).to_pylist()}


SAME = (
    "session_id",
    "node",
    "parent_nodes",
    "prompt_parts",
    "prompt_roles",
    "block_hashes",
    "prompt_tokens_est",
)


def test_a_replay_on_ray_sends_what_the_in_process_replay_sends(
    ray_cluster: None, recorded_run: str, emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    plan = plan_from_run(recorded_run)
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    targets = [TargetSpec(name="t", url=emu.url, engine="sglang")]
    local = replay_run(plan, targets, output_dir=str(tmp_path / "a"), record_text=True)
    on_ray = replay_run(
        plan, targets, output_dir=str(tmp_path / "b"), record_text=True, executor=RayExecutor(workers=2)
    )
    a, b = request_rows(local.run_dir), request_rows(on_ray.run_dir)
    assert sorted(a) == sorted(b) == sorted(request_rows(recorded_run))
    for rid, row in a.items():
        assert {k: row[k] for k in SAME} == {k: b[rid][k] for k in SAME}, rid
    assert all(r["status"] == "ok" for r in b.values())
    # a session stays on one worker, and both workers had sessions
    workers_of = {}
    for r in b.values():
        workers_of.setdefault(r["session_id"], set()).add(r["worker"])
    assert all(len(w) == 1 for w in workers_of.values())
    assert {w for ws in workers_of.values() for w in ws} == {0, 1}
    manifest = on_ray.manifest
    assert [w.sessions for w in manifest.workers] == [4, 4] and manifest.status.value == "complete"
    assert manifest.targets[0].sessions_finished == 8
    # dependent mode on Ray: no child before its parent's answer
    by_node = {(r["session_id"], r["node"]): r for r in b.values()}
    for r in b.values():
        for p in r["parent_nodes"]:
            parent = by_node[(r["session_id"], p)]
            assert r["sent_ns"] >= parent["sent_ns"] + parent["e2e_ns"]


def test_copies_of_a_session_share_its_system_prompt_and_nothing_after(
    recorded_run: str, emulator: Callable[..., EmulatorThread]
) -> None:
    plan = plan_from_run(recorded_run)
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")
    records, outcome = send_replay(plan, target, mode="dependent", copies=3)
    assert len(records) == 3 * len(plan.items) and all(r.ok for r in records)
    assert outcome.sessions_started == outcome.sessions_finished == 3 * 8
    by_id = {r.identity.request_id: r for r in records}
    for item in plan.items:
        original = by_id[item.identity.request_id]
        for k in (1, 2):
            copy = by_id[f"{item.identity.request_id}#{k}"]
            assert copy.identity.session_id == f"{item.identity.session_id}#{k}"
            assert copy.identity.parent_nodes == original.identity.parent_nodes
            roles, parts, cparts = (
                original.prompt_roles or (),
                original.prompt_parts or (),
                copy.prompt_parts or (),
            )
            first_user = next(i for i, role in enumerate(roles) if role != "system")
            assert cparts[:first_user] == parts[:first_user]  # the system prompt, shared
            mark, rest = cparts[first_user].split(" ", 1)  # its own content: one word, then the recorded
            assert mark.startswith(f"[copy-{k}-") and rest == parts[first_user]
            assert cparts[first_user + 1 :] == parts[first_user + 1 :]
    # the engine reuses a session's system prompt across its copies and nothing after it: of
    # the three copies of a session's first request, whichever arrive after another hit exactly
    # the system prompt (sessions run at once, so which one comes first is the machine's)
    for item in plan.items:
        if item.parents:
            continue
        firsts = [by_id[item.identity.request_id + suffix] for suffix in ("", "#1", "#2")]
        system_tokens = len((firsts[0].prompt_parts or ("",))[0].split())
        copy_hits = [r.cached_tokens or 0 for r in firsts[1:]]
        assert all(h <= system_tokens for h in copy_hits), copy_hits  # nothing past the system prompt
        assert sum(1 for r in firsts if (r.cached_tokens or 0) >= system_tokens) >= 2, firsts
    # over the whole replay the engine reuses what the ideal says, whatever the arrival order
    assert sum(r.cached_tokens or 0 for r in records) <= sum(r.ideal_cached_tokens_est or 0 for r in records)


def test_copies_of_hash_id_sessions_rename_only_their_private_blocks() -> None:
    plan = import_trace(MOONCAKE, "mooncake", Filters(limit=60))
    sessions = group_sessions(plan.items)
    shared = shared_block_ids(sessions)
    assert shared  # the conversation trace's requests share leading blocks
    stride = len(plan.items)
    for s in sessions:
        (item,) = s.items
        (copied,) = copy_session(s, 1, stride, shared).items
        kept = [a == b for a, b in zip(item.block_ids, copied.block_ids, strict=True)]
        assert kept == [b in shared for b in item.block_ids]
        assert copied.index == stride + item.index and copied.prompt_tokens == item.prompt_tokens
        # a request without a session stays without one; its request id names the copy
        assert copied.identity.session_id == item.identity.session_id == ""
        assert copied.identity.request_id == f"{item.identity.request_id}#1"


def chain_plan(sessions: int, gap_s: float = 0.0, every_s: float = 0.0) -> ReplayPlan:
    """Sessions of two requests, the second after the first; session s starts at s * every_s."""
    items = []
    for s in range(sessions):
        for n in range(2):
            items.append(
                ReplayItem(
                    index=len(items),
                    offset_s=s * every_s,
                    prompt_tokens=40,
                    max_tokens=4,
                    block_ids=(1000, 10 * s + n + 1),
                    block_tokens=16,
                    parents=(len(items) - 1,) if n else (),
                    gap_s=gap_s,
                    identity=RequestIdentity(session_id=f"s{s}", node=f"n{n}", request_id=f"s{s}:n{n}"),
                )
            )
    return ReplayPlan(items=items, source="test", source_format="test", default_mode="dependent")


def test_a_closed_loop_keeps_at_most_max_sessions_in_progress(
    emulator: Callable[..., EmulatorThread],
) -> None:
    emu = emulator(engine="sglang", timing="fixed", first_token_ms=30, token_ms=5)
    target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")
    records, outcome = send_replay(chain_plan(6), target, mode="dependent", max_sessions=2)
    assert len(records) == 12 and all(r.ok for r in records)
    assert outcome.sessions_started == outcome.sessions_finished == 6
    spans = {}
    for r in records:
        start, end = r.sent_ns, r.sent_ns + (r.e2e_ns or 0)
        s0, e0 = spans.get(r.identity.session_id, (start, end))
        spans[r.identity.session_id] = (min(s0, start), max(e0, end))
    # at the start of each session, at most one other is still in progress
    for sid, (start, _) in spans.items():
        others = [o for o, (s, e) in spans.items() if o != sid and s <= start < e]
        assert len(others) <= 1, (sid, others)


def test_a_replay_retries_retryable_failures_when_asked(emulator: Callable[..., EmulatorThread]) -> None:
    emu = emulator(engine="sglang", timing="zero", faults=FaultSpec(seed=3, http_503=0.25))
    target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")
    records, _ = send_replay(chain_plan(10), target, mode="dependent", retries=10, retry_backoff_s=0.001)
    retried = [r for r in records if r.identity.attempt > 0]
    assert retried and all(
        r.identity.retry_of and r.identity.request_id.startswith(r.identity.retry_of) for r in retried
    )
    finals = {r.identity.retry_of or r.identity.request_id for r in records if r.ok}
    assert len(finals) == 20  # every request got through in the end
    plain, _ = send_replay(chain_plan(10), target, mode="dependent")
    assert all(r.identity.attempt == 0 for r in plain)  # off by default


def test_a_worker_lost_mid_replay_leaves_the_rest_going(
    ray_cluster: None, emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    import ray

    emu = emulator(engine="sglang", timing="fixed", first_token_ms=40, token_ms=20)
    executor = RayExecutor(workers=2, poll_s=0.2)
    # sessions start over 10 s: the lost worker has sessions still to come whenever it dies
    plan = chain_plan(20, gap_s=0.1, every_s=0.5)

    def kill_when_busy(stats: RunStats) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and stats.requests < 6:
            time.sleep(0.05)
        ray.kill(executor.actors[1])

    def on_start(_target: ResolvedTarget, stats: RunStats) -> None:
        threading.Thread(target=kill_when_busy, args=(stats,), daemon=True).start()

    result = replay_run(
        plan, [TargetSpec(name="t", url=emu.url, engine="sglang")], output_dir=str(tmp_path),
        executor=executor, on_target_start=on_start,
    )  # fmt: skip
    dead, alive = result.manifest.workers[1], result.manifest.workers[0]
    assert not dead.alive and (dead.sessions_cut or 0) > 0
    assert alive.alive and alive.sessions_cut == 0
    table = read_requests(result.run_dir)
    per_worker = Counter(table["worker"].to_pylist())
    assert per_worker[0] == 20  # the other worker's 10 sessions ran to their end
    assert per_worker[1] == dead.requests  # what the driver received from the lost one is kept
    assert "died" in (result.manifest.status_reason or "")


def test_ctrl_c_ends_a_replay_on_ray_with_an_interrupted_manifest(
    recorded_run: str, emulator_process: Callable[..., object], tmp_path: Path
) -> None:
    emu = emulator_process(
        "--engine", "sglang", "--timing", "fixed", "--first-token-ms", "200", "--token-ms", "100"
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "swarm", "replay", recorded_run, "--target", f"t={emu.url}",  # type: ignore[attr-defined]
            "--executor", "ray", "--workers", "2", "--copies", "4", "--output", str(out), "--no-progress",
            "--flush-interval", "1",  # parts close every second: one exists once requests are answered
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(out.glob("*/requests/*.parquet")):
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, err
    (run_dir,) = out.iterdir()
    manifest = RunManifest.read(RunStorage.at(str(run_dir)))
    assert manifest.status.value == "interrupted", manifest.status_reason
    assert manifest.replay_of is not None and manifest.replay_of["copies"] == 4
    table = read_requests(str(run_dir))
    assert 0 < table.num_rows < 4 * len(request_rows(recorded_run))
    assert set(table["status"].to_pylist()) <= {"ok", "cancelled"}


def test_replay_cli_plays_each_session_n_times(
    recorded_run: str, emulator_process: Callable[..., object], tmp_path: Path
) -> None:
    emu = emulator_process("--engine", "sglang", "--timing", "zero")
    done = subprocess.run(
        [
            sys.executable, "-m", "swarm", "replay", recorded_run, "--target", f"t={emu.url}",  # type: ignore[attr-defined]
            "--copies", "5", "--max-sessions", "3", "--output", str(tmp_path / "out"), "--json", "--executor", "inprocess",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["replay_of"]["copies"] == 5 and summary["replay_of"]["max_sessions"] == 3
    rows = read_requests(summary["run_dir"]).to_pylist()
    assert len(rows) == 5 * len(request_rows(recorded_run))
    assert len({r["session_id"] for r in rows}) == 5 * 8
    manifest = RunManifest.read(RunStorage.at(summary["run_dir"]))
    assert manifest.targets[0].sessions_finished == 40


def test_bad_replay_flags_name_the_flag(recorded_run: str) -> None:
    for flags, word in ((["--copies", "0"], "--copies"), (["--max-sessions", "-1"], "--max-sessions")):
        done = subprocess.run(
            [sys.executable, "-m", "swarm", "replay", recorded_run, *flags],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0 and word in done.stderr, done.stderr


def test_caps_are_shared_by_the_parts_of_a_split_source() -> None:
    limits = ReplaySource(chain_plan(6), limits=SendLimits(max_in_flight=3), max_sessions=2).split(4)
    assert len(limits) == 2  # two sessions at once cannot be shared by more than two workers
    assert [p.max_sessions for p in limits] == [1, 1] and [p.limits.max_in_flight for p in limits] == [2, 1]
    spec = WorkloadSpec(agents=10, mix=[MixEntry(profile="math_reasoner", topology="chain")])
    parts = AgentSource(Workload(spec), SendLimits(max_in_flight=3, max_requests=7)).split(4)
    assert [p.limits.max_in_flight for p in parts] == [1, 1, 1]  # three slots: three workers
    assert [p.limits.max_requests for p in parts] == [3, 2, 2]
    assert sorted(i for p in parts for i in p.agent_ids) == list(range(10))
    unlimited = AgentSource(Workload(spec))
    assert [(p.limits.max_in_flight, p.limits.max_requests) for p in unlimited.split(4)] == [(0, None)] * 4


def test_replay_source_splits_sessions_whole() -> None:
    source = ReplaySource(chain_plan(7), mode="dependent", copies=2, max_sessions=5)
    parts = source.split(3)
    assert [p.session_count() for p in parts] == [5, 5, 4]
    assert sum(p.max_sessions for p in parts) == 5
    keys = [s.key for p in parts for s in p.sessions]
    assert sorted(keys) == sorted(s.key for s in source.sessions)
    assert all(len(s.items) == 2 for p in parts for s in p.sessions)
