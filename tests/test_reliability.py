"""Client behaviour under faults: retries (off by default, each attempt a row), the failure
policy of agents, the circuit breaker, a full disk, and what the report says about all that."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from swarm.analysis.report import build_report, load_run
from swarm.emulator.faults import FaultSpec
from swarm.launch import execute_run
from swarm.record import RequestIdentity, RequestRecord, Status
from swarm.runtime.breaker import CircuitBreaker
from swarm.runtime.live_stats import RunStats
from swarm.runtime.retry import is_retryable, retry_delay_s
from swarm.runtime.specs import RunSpec, TargetSpec, TimeoutSpec
from swarm.trace.manifest import RunManifest, RunStatus
from swarm.trace.reader import list_parts, read_requests
from swarm.trace.sink import ParquetTraceSink
from swarm.workload.arrival import ArrivalSpec
from swarm.workload.workload import MixEntry, WorkloadSpec

PROFILE = """\
name: quick
system_prompt: {style: prose, tokens: 100}
task_tokens: {dist: constant, value: 20}
instruction_tokens: {dist: constant, value: 8}
output_tokens: {default: {dist: constant, value: 8}}
think_time_s: {dist: constant, value: 0}
tool_time_s: {dist: constant, value: 0}
"""
# every node runs (no evaluate calls, nothing pruned): 1 plan + 2 + 4 thoughts + an answer
TOPOLOGY = """\
name: small_tree
generator: tree_of_thought
params: {branching: 2, depth: 2, evaluate: false, beam_width: 4}
"""


@pytest.fixture
def specs(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "quick.yaml").write_text(PROFILE)
    (tmp_path / "small_tree.yaml").write_text(TOPOLOGY)
    return str(tmp_path / "quick.yaml"), str(tmp_path / "small_tree.yaml")


def _run(
    url: str, out: Path, specs: tuple[str, str], *, agents: int = 6, **overrides: object
) -> tuple[RunManifest, list[dict[str, object]]]:
    workload_fields = {k: overrides.pop(k) for k in ("on_failure",) if k in overrides}
    spec = RunSpec(
        workload=WorkloadSpec(
            agents=agents,
            mix=[MixEntry(profile=specs[0], topology=specs[1])],
            arrival=ArrivalSpec(process="constant", rate=50),
            **workload_fields,  # type: ignore[arg-type]
        ),
        targets=[TargetSpec(name="emu", url=url, engine="sglang")],
        output_dir=str(out),
        executor="inprocess",
        timeouts=TimeoutSpec(first_token_s=2, idle_s=2, total_s=20),
        **overrides,  # type: ignore[arg-type]
    )
    result = execute_run(spec)
    rows = read_requests(result.run_dir).to_pylist()
    return result.manifest, rows


def _faulty(emulator: object, text: str) -> str:
    emu = emulator(timing="zero", faults=FaultSpec.parse(text))  # type: ignore[operator]
    return str(emu.url)


def test_retries_are_off_by_default(emulator: object, tmp_path: Path, specs: tuple[str, str]) -> None:
    url = _faulty(emulator, "http_503=0.3,seed=1")
    manifest, rows = _run(url, tmp_path, specs)
    assert manifest.status is RunStatus.COMPLETE
    assert all(r["attempt"] == 0 and r["retry_of"] is None for r in rows)
    failed = [r for r in rows if r["status"] != "ok"]
    assert failed and all(r["http_status"] == 503 for r in failed)
    assert len({r["request_id"] for r in rows}) == len(rows)
    # every request sent is a row, failed ones included (rows + lost = sent, nothing lost here)
    assert manifest.requests_sent == len(rows) == sum(manifest.counts.values())
    assert manifest.records_lost == manifest.records_lost_with_workers == 0


def test_each_retry_is_its_own_row_linked_to_the_first(
    emulator: object, tmp_path: Path, specs: tuple[str, str]
) -> None:
    url = _faulty(emulator, "http_503=0.3,seed=1")
    _, rows = _run(url, tmp_path, specs, retries=4, retry_backoff_s=0.01, on_failure="standin")
    by_id = {r["request_id"]: r for r in rows}
    assert len(by_id) == len(rows)
    retries = [r for r in rows if r["attempt"] > 0]
    assert retries
    for r in retries:
        first = by_id[r["retry_of"]]
        assert first["attempt"] == 0 and first["status"] == "http_error"
        assert (first["session_id"], first["node"]) == (r["session_id"], r["node"])
        assert r["request_id"] == f"{r['retry_of']}~retry{r['attempt']}"
        assert r["sent_ns"] >= first["sent_ns"] + first["e2e_ns"]
    # with stand-ins the trees keep their shape: 8 nodes each
    nodes = {(r["session_id"], r["node"]) for r in rows}
    assert len(nodes) == 6 * 8
    # attempts of one node are numbered 0, 1, 2, ... with no gap, and stop at the first ok one
    # or after the 4 retries
    for n in nodes:
        mine = sorted((r for r in rows if (r["session_id"], r["node"]) == n), key=lambda r: r["attempt"])
        assert [r["attempt"] for r in mine] == list(range(len(mine)))
        assert all(r["status"] == "http_error" for r in mine[:-1])
        assert mine[-1]["status"] == "ok" or len(mine) == 5


def test_429_retry_waits_for_retry_after(emulator: object, tmp_path: Path, specs: tuple[str, str]) -> None:
    url = _faulty(emulator, "http_429=0.2,retry_after_s=1,seed=2")
    _, rows = _run(url, tmp_path, specs, agents=2, retries=3, retry_backoff_s=0)
    by_id = {r["request_id"]: r for r in rows}
    retries = [r for r in rows if r["attempt"] == 1]
    assert retries
    for r in retries:
        first = by_id[r["retry_of"]]
        waited_ns = r["sent_ns"] - (first["sent_ns"] + first["e2e_ns"])
        assert waited_ns >= 0.95e9, waited_ns


def test_retry_policy_decisions() -> None:
    def record(status: Status, http: int | None = None, **extra: object) -> RequestRecord:
        return RequestRecord(
            identity=RequestIdentity(), dialect="openai-chat", model="m", stream=True, scheduled_ns=0,
            sent_ns=0, queue_ns=0, ttft_ns=None, e2e_ns=1, chunk_ns=(), status=status, http_status=http,
            extra=dict(extra),
        )  # fmt: skip

    assert is_retryable(record(Status.HTTP_ERROR, 503)) and is_retryable(record(Status.HTTP_ERROR, 429))
    assert not is_retryable(record(Status.HTTP_ERROR, 400))  # the request is wrong: again is no better
    assert not is_retryable(record(Status.CANCELLED)) and not is_retryable(record(Status.OK))
    assert all(is_retryable(record(s)) for s in (Status.CONNECT_ERROR, Status.TIMEOUT, Status.STREAM_ERROR))
    assert [retry_delay_s(record(Status.TIMEOUT), k, 0.5) for k in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert retry_delay_s(record(Status.HTTP_ERROR, 429, retry_after_s=3.0), 1, 0.5) == 3.0
    assert retry_delay_s(record(Status.HTTP_ERROR, 429, retry_after_s=1e6), 1, 0.5) == 60.0


def test_failure_policy_abort_or_standin(emulator: object, tmp_path: Path, specs: tuple[str, str]) -> None:
    url = _faulty(emulator, "http_500=0.25,seed=4")
    _, aborted = _run(url, tmp_path / "a", specs, on_failure="abort_branch")
    url = _faulty(emulator, "http_500=0.25,seed=4")
    _, standin = _run(url, tmp_path / "s", specs, on_failure="standin")
    # standin: every node of every tree is sent, failures included (6 trees of 8 nodes)
    assert len(standin) == 6 * 8
    assert any(r["status"] != "ok" for r in standin)
    # abort: a failed node's descendants are never sent
    assert len(aborted) < 6 * 8
    failed = {(r["session_id"], r["node"]) for r in aborted if r["status"] != "ok"}
    for r in aborted:
        assert not any((r["session_id"], p) in failed for p in r["parent_nodes"])


def test_circuit_breaker_stops_a_run_against_a_broken_server(
    emulator: object, tmp_path: Path, specs: tuple[str, str]
) -> None:
    url = _faulty(emulator, "http_503=1")
    started = time.monotonic()
    manifest, rows = _run(url, tmp_path, specs, agents=400, max_error_rate=0.5, error_window=20)
    assert time.monotonic() - started < 60
    assert manifest.status is RunStatus.STOPPED
    assert manifest.status_reason is not None
    assert "target emu: circuit breaker: 20 of the last 20 requests failed" in manifest.status_reason
    assert "http_error 20" in manifest.status_reason
    assert len(rows) < 400  # it stopped long before every agent had sent
    assert all(r["status"] in ("http_error", "cancelled") for r in rows)
    report = build_report(load_run(tmp_path / manifest.run_id))
    assert any("circuit breaker" in w for w in report["warnings"])


def test_breaker_window_arithmetic() -> None:
    breaker = CircuitBreaker(0.5, window=4)
    assert breaker.observe_many(["ok", "http_error", "ok"]) is None  # window not full yet
    assert breaker.observe("ok") is None  # 1 of 4
    assert breaker.observe("cancelled") is None  # not the server's failure: not counted
    reason = breaker.observe("timeout")  # ok, http_error... -> http_error, ok, ok, timeout: 2 of 4
    assert reason is not None and "2 of the last 4" in reason and "http_error 1, timeout 1" in reason
    assert breaker.observe("timeout") is None  # trips once


def test_a_full_disk_ends_the_run_cleanly(emulator: object, tmp_path: Path, specs: tuple[str, str]) -> None:
    """Parts after the first are written to /dev/full (every write fails with ENOSPC, as on a
    full disk): the run ends with the reason, the first part reads, and the loss is counted."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    emu = emulator(timing="fixed", first_token_ms=5, token_ms=5)
    out = tmp_path / "runs"
    out.mkdir()
    planted = threading.Event()

    def plant() -> None:  # once the run folder exists, part 1 onwards go to /dev/full
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runs = list(out.iterdir())
            if runs:
                requests = runs[0] / "requests"
                requests.mkdir(exist_ok=True)
                for seq in range(1, 200):
                    (requests / f"part-emu-{seq:05d}.parquet.inprogress").symlink_to("/dev/full")
                planted.set()
                return
            time.sleep(0.005)

    planter = threading.Thread(target=plant)
    planter.start()
    spec = RunSpec(
        workload=WorkloadSpec(
            agents=40, mix=[MixEntry(profile=specs[0], topology=specs[1])],
            arrival=ArrivalSpec(process="constant", rate=10),
        ),
        targets=[TargetSpec(name="emu", url=emu.url, engine="sglang")],
        output_dir=str(out), executor="inprocess", flush_interval_s=0.3,
    )  # fmt: skip
    started = time.monotonic()
    result = execute_run(spec)
    planter.join()
    assert planted.is_set()
    assert time.monotonic() - started < 30  # it ended, rather than running on without a trace
    manifest = result.manifest
    assert manifest.status is RunStatus.FAILED
    assert manifest.status_reason is not None
    assert "cannot write the trace under" in manifest.status_reason
    assert "No space left on device" in manifest.status_reason
    assert manifest.records_lost > 0
    parts = list_parts(result.run_dir)
    assert [p.name for p in parts] == ["part-emu-00000.parquet"]
    table = pq.read_table(parts[0])  # the part closed before the failure is whole
    assert table.num_rows > 0
    assert table.num_rows + manifest.records_lost == sum(manifest.counts.values())
    report = build_report(load_run(result.run_dir))
    assert any("could not be written" in w for w in report["warnings"])


def test_sink_refuses_writes_after_a_failure_and_counts_them(tmp_path: Path) -> None:
    sink = ParquetTraceSink(tmp_path, writer="w", batch_rows=1, flush_interval_s=None)
    (tmp_path / "requests" / "part-w-00000.parquet.inprogress").symlink_to("/dev/full")
    record = RequestRecord(
        identity=RequestIdentity(request_id="a"), dialect="openai-chat", model="m", stream=True,
        scheduled_ns=0, sent_ns=0, queue_ns=0, ttft_ns=None, e2e_ns=1, chunk_ns=(), status=Status.OK,
    )  # fmt: skip
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with pytest.raises(OSError, match="No space left on device"):
        for _ in range(10_000):  # pyarrow buffers a little before it writes
            sink.write(record)
    assert sink.failure is not None
    with pytest.raises(OSError):
        sink.write(record)
    sink.close()  # no second error
    assert sink.rows_lost >= 2 and sink.rows_written == 0


def test_report_says_when_the_generator_fell_behind(tmp_path: Path) -> None:
    import dataclasses

    from bench.synthetic import synthetic_record

    RunManifest(run_id="late", status=RunStatus.COMPLETE).write(tmp_path)
    with ParquetTraceSink(tmp_path, writer="w") as sink:
        for i in range(200):  # every 10th request left 40 ms after it was due
            q = 40_000_000 if i % 10 == 0 else 100_000
            r = synthetic_record(i)
            sink.write(dataclasses.replace(r, queue_ns=q, sent_ns=r.scheduled_ns + q))
    report = build_report(load_run(tmp_path))
    late = [w for w in report["warnings"] if "fell behind its schedule" in w]
    assert len(late) == 1 and "late by 40.0 ms at p99" in late[0]
    stats = RunStats()
    for q in (5_000_000, 11_000_000, 40_000_000):
        late = RequestRecord(
            identity=RequestIdentity(), dialect="openai-chat", model="m", stream=True,
            scheduled_ns=0, sent_ns=q, queue_ns=q, ttft_ns=1, e2e_ns=1, chunk_ns=(1,), status=Status.OK,
        )  # fmt: skip
        stats.add(late)
    assert stats.late == 2 and stats.snapshot()["late"] == 2


@pytest.mark.slow
def test_circuit_breaker_on_ray_judges_all_workers_at_the_driver(
    ray_cluster: None, emulator: object, tmp_path: Path, specs: tuple[str, str]
) -> None:
    url = _faulty(emulator, "http_503=1")
    spec = RunSpec(
        workload=WorkloadSpec(
            agents=400, mix=[MixEntry(profile=specs[0], topology=specs[1])],
            arrival=ArrivalSpec(process="constant", rate=50),
        ),
        targets=[TargetSpec(name="emu", url=url, engine="sglang")],
        output_dir=str(tmp_path), executor="ray", workers=2, max_error_rate=0.9, error_window=30,
    )  # fmt: skip
    result = execute_run(spec)
    manifest = result.manifest
    assert manifest.status is RunStatus.STOPPED, manifest.status_reason
    assert (
        manifest.status_reason is not None and "circuit breaker: 30 of the last 30" in manifest.status_reason
    )
    rows = read_requests(result.run_dir)
    assert rows.num_rows < 400
    assert set(rows["worker"].to_pylist()) == {0, 1}


def test_replay_stops_on_the_circuit_breaker(emulator: object, tmp_path: Path) -> None:
    from sending import replay_run

    from swarm.replay.formats import import_trace

    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "\n".join(
            f'{{"timestamp": {i * 10}, "input_length": 64, "output_length": 4, "hash_ids": [{i}]}}'
            for i in range(300)
        )
    )
    url = _faulty(emulator, "http_500=1")
    result = replay_run(
        import_trace(trace, "mooncake"), [TargetSpec(name="emu", url=url, engine="sglang")],
        output_dir=str(tmp_path / "runs"), speed=1, max_error_rate=1.0, error_window=10,
    )  # fmt: skip  # 10 ms apart: at 1 ms, a loaded machine sent all 300 before ten answers were read
    assert result.manifest.status is RunStatus.STOPPED
    assert "circuit breaker: 10 of the last 10" in (result.manifest.status_reason or "")
    assert read_requests(result.run_dir).num_rows < 300


def test_cli_says_why_a_run_stopped_and_exits_3(emulator_process: object, tmp_path: Path) -> None:
    import subprocess
    import sys

    emu = emulator_process("--timing", "zero", "--faults", "http_503=1")  # type: ignore[operator]
    out = subprocess.run(
        [
            sys.executable, "-m", "swarm", "run", "--executor", "inprocess", "--no-progress",
            "--target", f"emu={emu.url}", "--engine", "sglang", "--agents", "200", "--arrival", "constant:100",
            "--max-error-rate", "0.8", "--error-window", "10", "--output", str(tmp_path),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 3, out.stderr
    assert "run stopped: target emu: circuit breaker: 10 of the last 10 requests failed" in out.stdout


def test_a_bug_in_an_agents_node_halts_the_run_with_its_reason(
    emulator: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node task of an agent that fails (a bug of swarm's) would leave its session's rest
    unsent and the trace short without a word: the run halts and names it instead."""
    from sending import send

    from swarm.runtime import agent
    from swarm.runtime.agent_source import AgentSource
    from swarm.runtime.context import ResolvedTarget
    from swarm.workload.workload import Workload

    real = agent.AgentRun._run_node

    async def broken(self: agent.AgentRun, node: str, ready_perf_ns: int) -> None:
        if self.plan.node(node).depth > 0:
            raise RuntimeError("cannot build this node")
        await real(self, node, ready_perf_ns)

    monkeypatch.setattr(agent.AgentRun, "_run_node", broken)
    emu = emulator(engine="sglang", timing="zero")  # type: ignore[operator]
    spec = WorkloadSpec(agents=2, mix=[MixEntry(profile="math_reasoner", topology="chain")])
    target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")
    records, outcome = send(AgentSource(Workload(spec)), target)
    assert outcome.halt_reason is not None and "cannot build this node" in outcome.halt_reason
    assert records and all(r.identity.depth == 0 for r in records)
