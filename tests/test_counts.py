"""Counts that mean what they say: a wait for the in-flight cap is not lateness, a tie is a
tie, a replay of a run is the same workload, an edited profile is a different one, and the
live view's rate is the run's average once it has ended."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from sending import replay_run, send_agents

from bench.synthetic import synthetic_record
from swarm.analysis.compare import WorkloadMismatch, compare, lead
from swarm.analysis.report import GENERATOR_BEHIND, build_report, load_run
from swarm.cli.live import LiveView
from swarm.emulator.http_server import EmulatorThread
from swarm.launch import execute_run
from swarm.record import RequestIdentity, RequestRecord, Status
from swarm.replay.from_run import plan_from_run
from swarm.runtime.context import ResolvedTarget
from swarm.runtime.live_stats import LATE_NS, RunStats
from swarm.runtime.sources import SendLimits
from swarm.runtime.specs import RunSpec, TargetSpec
from swarm.trace.manifest import RunManifest, RunStatus
from swarm.trace.sink import ParquetTraceSink
from swarm.workload.arrival import ArrivalSpec
from swarm.workload.catalog import Catalog
from swarm.workload.workload import MixEntry, Workload, WorkloadSpec

ONE_CALL = """
name: one_call
system_prompt: {style: prose, tokens: 40}
task_tokens: {dist: constant, value: 10}
instruction_tokens: {dist: constant, value: 4}
output_tokens: {default: {dist: constant, value: 1}}
think_time_s: {dist: constant, value: 0}
"""


def _record(queue_ns: int, slot_wait_ns: int) -> RequestRecord:
    return RequestRecord(
        identity=RequestIdentity(), dialect="openai-chat", model="m", stream=True, scheduled_ns=0,
        sent_ns=queue_ns, queue_ns=queue_ns, ttft_ns=1, e2e_ns=1, chunk_ns=(1,), status=Status.OK,
        slot_wait_ns=slot_wait_ns,
    )  # fmt: skip


def test_a_wait_for_the_in_flight_cap_is_not_a_late_send() -> None:
    stats = RunStats()
    stats.add(_record(queue_ns=400_000_000, slot_wait_ns=399_000_000))  # waited for the cap: on time
    stats.add(_record(queue_ns=40_000_000, slot_wait_ns=0))  # the generator was 40 ms behind
    stats.add(_record(queue_ns=60_000_000, slot_wait_ns=20_000_000))  # waited 20, then 40 ms behind
    assert stats.late == 2 and stats.slot_waits == 2
    assert LATE_NS < stats.lag_ns_max == 40_000_000


def test_the_report_warns_of_lag_but_not_of_slot_waits(tmp_path: Path) -> None:
    for name, slot_share in (("capped", 1.0), ("behind", 0.0)):
        run_dir = tmp_path / name
        run_dir.mkdir()
        RunManifest(run_id=name, status=RunStatus.COMPLETE).write(run_dir)
        with ParquetTraceSink(run_dir, writer="w") as sink:
            for i in range(200):  # every request left 300 ms after it was due
                r = synthetic_record(i)
                q = 300_000_000
                sink.write(
                    dataclasses.replace(
                        r, queue_ns=q, sent_ns=r.scheduled_ns + q, slot_wait_ns=int(q * slot_share)
                    )
                )
        report = build_report(load_run(run_dir))
        behind = [w for w in report["warnings"] if "fell behind its schedule" in w]
        fig = report["targets"]["emulator-sglang"]["figures"]
        assert fig["queue_ms"]["p99"] == pytest.approx(300)
        if name == "capped":
            assert (
                behind == []
                and fig["lag_ms"]["p99"] == pytest.approx(0)
                and fig["slot_wait_ms"]["p99"] == pytest.approx(300)
            )
        else:
            assert len(behind) == 1 and fig["lag_ms"]["p99"] == pytest.approx(300)


def test_the_agent_records_its_wait_for_a_slot(
    tmp_path: Path, emulator: Callable[..., EmulatorThread]
) -> None:
    # three one-call agents due at once, one slot, each answer at least 100 ms away: the second
    # waits at least one answer for its slot, the third at least two (a sleep is never short)
    emu = emulator(engine="sglang", timing="fixed", first_token_ms=100, token_ms=1)
    (tmp_path / "one_call.yaml").write_text(ONE_CALL)
    spec = WorkloadSpec(
        agents=3, mix=[MixEntry(profile="one_call", topology="chain")],
        arrival=ArrivalSpec(process="all_at_once", rate=None),
    )  # fmt: skip
    workload = Workload(spec, Catalog(agent_dirs=[tmp_path]))
    records: list[RequestRecord] = []
    target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")
    records = send_agents(workload, target, limits=SendLimits(max_in_flight=1))
    firsts = sorted((r for r in records if r.identity.node.endswith("0")), key=lambda r: r.slot_wait_ns)
    waits = [r.slot_wait_ns for r in firsts]
    assert len(waits) == 3 and waits[0] == 0, waits  # a free slot is no wait at all
    assert waits[1] >= 100_000_000 and waits[2] >= 200_000_000, waits
    assert all(r.slot_wait_ns <= r.queue_ns + 1_000_000 for r in records)  # a part of queue_ns
    # without a cap nothing waits for a slot
    uncapped: list[RequestRecord] = []
    uncapped = send_agents(workload, target, limits=SendLimits(max_in_flight=0))
    assert {r.slot_wait_ns for r in uncapped} == {0}


def test_a_lead_below_the_threshold_is_a_tie() -> None:
    assert lead([100.0, 101.0], "lower", tie_within=0.02) == (None, pytest.approx(1.01))
    assert lead([100.0, 101.0], "lower", tie_within=0.0) == (0, pytest.approx(1.01))
    assert lead([0.50, 0.60], "higher", tie_within=0.02) == (1, pytest.approx(1.2))
    assert lead([3.0, 3.0], "lower", tie_within=0.0) == (None, 1.0)


def test_the_live_rate_is_the_runs_average_once_sending_stopped() -> None:
    view = LiveView(total_sessions=1)
    stats = RunStats()
    view.start_target("t", stats)
    stats.completion_tokens = 3321
    stats.finished = True
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(view)
    text = console.export_text()
    row = next(line for line in text.splitlines() if line.startswith("│ t"))
    cells = [c.strip() for c in row.split("│")]
    assert cells[7] not in ("0", "-"), row  # out tok/s: an average, not the last second's 0


def _run(url: str, out: Path, profile: Path, seed: int = 0) -> str:
    spec = RunSpec(
        workload=WorkloadSpec(
            agents=4, seed=seed, mix=[MixEntry(profile=str(profile), topology="chain")],
            arrival=ArrivalSpec(process="constant", rate=20),
        ),
        targets=[TargetSpec(name="a", url=url, engine="sglang")],
        output_dir=str(out), executor="inprocess", metrics_interval_s=0,
    )  # fmt: skip
    return str(execute_run(spec).run_dir)


TINY = """
name: tiny_reasoner
system_prompt: {style: prose, tokens: 60}
task_tokens: {dist: constant, value: 12}
instruction_tokens: {dist: constant, value: 4}
output_tokens: {default: {dist: constant, value: 4}}
think_time_s: {dist: constant, value: 0}
"""


def test_a_run_and_its_replay_compare_and_an_edited_profile_does_not(
    tmp_path: Path, emulator: Callable[..., EmulatorThread]
) -> None:
    emu = emulator(engine="sglang", timing="zero")
    profile = tmp_path / "tiny_reasoner.yaml"
    profile.write_text(TINY)
    run_a = _run(emu.url, tmp_path / "runs", profile)
    # a dependent replay of a run is the same workload as the run: compared, not refused
    plan = plan_from_run(run_a)
    assert plan.notes == [] and all(i.prompt_parts is not None for i in plan.items)  # rebuilt exactly
    replayed = replay_run(
        plan, [TargetSpec(name="b", url=emu.url, engine="sglang")], output_dir=str(tmp_path / "runs")
    )
    result = compare([load_run(run_a), load_run(replayed.run_dir)])
    # a zero-timing emulator answers in a fraction of a ms: on a busy machine the client's own
    # lag may pass 5 % of that, or its sends fall behind their schedule, and be flagged, rightly;
    # nothing else may be said
    said = [
        w
        for w in result.warnings
        if "behind the kernel's receive stamps" not in w and GENERATOR_BEHIND not in w
    ]
    assert result.columns == ["a", "b"] and said == []
    # a timed replay paces the same requests differently: refused, in words
    timed = replay_run(
        plan,
        [TargetSpec(name="c", url=emu.url, engine="sglang")],
        mode="timed",
        output_dir=str(tmp_path / "runs"),
    )
    with pytest.raises(
        WorkloadMismatch, match=r"pacing \(replay mode and speed\): \S+ dependent x1, \S+ timed x1"
    ):
        compare([load_run(run_a), load_run(timed.run_dir)])
    # the same spec after an edit of the profile's file is another workload
    profile.write_text(TINY.replace("value: 4}}", "value: 9}}"))
    run_b = _run(emu.url, tmp_path / "runs", profile)
    a, b = RunManifest.read(run_a), RunManifest.read(run_b)
    assert a.spec == b.spec and a.spec_hash != b.spec_hash
    with pytest.raises(WorkloadMismatch) as refused:
        compare([load_run(run_a), load_run(run_b)])
    message = str(refused.value)
    assert (
        "workload (spec, profiles and topologies)" in message and "(profile tiny_reasoner differ)" in message
    )
    assert "{" not in message  # words, not Python dicts
    # a replay of the first run no longer rebuilds its prompts from the edited profile
    stale = plan_from_run(run_a)
    assert any("profile tiny_reasoner changed since the run" in n for n in stale.notes), stale.notes
    assert all(i.prompt_parts is None for i in stale.items)


def _synthetic_runs(
    tmp_path: Path, changes: dict[str, Callable[[RequestRecord], RequestRecord]]
) -> list[Any]:
    """One loaded run per name, each of 100 synthetic records passed through its change."""
    runs = []
    for name, change in changes.items():
        run_dir = tmp_path / name
        run_dir.mkdir()
        RunManifest(run_id=name, status=RunStatus.COMPLETE, seed=0, spec_hash="x").write(run_dir)
        with ParquetTraceSink(run_dir, writer="w") as sink:
            for i in range(100):
                sink.write(change(synthetic_record(i).with_identity(target=name)))
        runs.append(load_run(run_dir))
    return runs


def _queued(q: int) -> Callable[[RequestRecord], RequestRecord]:
    return lambda r: dataclasses.replace(r, queue_ns=q, sent_ns=r.scheduled_ns + q)


def _lagged(lag_ns: int) -> Callable[[RequestRecord], RequestRecord]:
    return lambda r: dataclasses.replace(r, clock="kernel", chunk_lag_ns=(lag_ns,) * len(r.chunk_ns))


def test_compare_repeats_a_runs_warning_that_its_generator_fell_behind(tmp_path: Path) -> None:
    runs = _synthetic_runs(tmp_path, {"ontime": _queued(100_000), "late": _queued(40_000_000)})
    result = compare(runs)
    assert any(w.startswith("late: late: the generator fell behind its schedule") for w in result.warnings), (
        result.warnings
    )
    assert not any(w.startswith("ontime:") and "fell behind" in w for w in result.warnings)


def test_report_and_compare_flag_a_client_that_read_late(tmp_path: Path) -> None:
    """A run whose client read its answers far behind the kernel's receive stamps is flagged in
    the report (with the lag beside the dispatch lag) and in compare; a prompt one is not."""
    runs = _synthetic_runs(tmp_path, {"prompt": _lagged(100_000), "slow": _lagged(30_000_000)})
    slow = build_report(runs[1])
    assert slow["targets"]["slow"]["figures"]["client_lag"]["p99"] == pytest.approx(30)
    assert any(w.startswith("slow: the client read 30.0 ms behind") for w in slow["warnings"]), slow[
        "warnings"
    ]
    assert not any("behind the kernel" in w for w in build_report(runs[0])["warnings"])
    result = compare(runs)
    assert any(w.startswith("slow: slow: the client read") for w in result.warnings), result.warnings


def test_cli_compare_names_differences_in_words(
    tmp_path: Path, emulator: Callable[..., EmulatorThread]
) -> None:
    emu = emulator(engine="sglang", timing="zero")
    profile = tmp_path / "tiny_reasoner.yaml"
    profile.write_text(TINY)
    a = _run(emu.url, tmp_path / "runs", profile)
    b = _run(emu.url, tmp_path / "runs", profile, seed=1)
    swarm = [sys.executable, "-m", "swarm", "compare"]
    out = subprocess.run([*swarm, a, b], capture_output=True, text=True)
    assert out.returncode == 2 and "seed: " in out.stderr and "{" not in out.stderr, out.stderr
    forced = subprocess.run([*swarm, a, b, "--force", "--json"], capture_output=True, text=True)
    assert forced.returncode == 0, forced.stderr
    rows = json.loads(forced.stdout)["rows"]
    assert rows and all(r["tie"] == (r["leader"] is None and r["ratio"] is not None) for r in rows)


def test_the_emulator_counts_its_steps_against_its_model(emulator: Callable[..., EmulatorThread]) -> None:
    from swarm.analysis.engine_metrics import emulator_figures
    from swarm.clients.client import HttpEngineClient, open_http_session
    from swarm.engines.registry import get_engine
    from swarm.request import ChatMessage, EngineRequest
    from swarm.runtime.metrics_scraper import SCHEMA, parse_prometheus

    emu = emulator(engine="sglang", step_base_ms=5.0, decode_ms_per_seq=0.0, prefill_ms_per_token=0.0)

    async def go() -> None:
        async with open_http_session() as session:
            client = HttpEngineClient(session, emu.url, get_engine("sglang"))
            await asyncio.gather(
                *(
                    client.send(EngineRequest(messages=(ChatMessage("user", f"q {i}"),), max_tokens=6))
                    for i in range(4)
                )
            )

    def scrape(t_ns: int) -> list[dict[str, object]]:
        import urllib.request

        with urllib.request.urlopen(emu.url + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return [
            {"target": "e", "engine": "sglang", "t_ns": t_ns, "metric": m, "labels": lab, "value": v}
            for m, lab, v in parse_prometheus(text) if m.startswith("swarm_emulator_")
        ]  # fmt: skip

    before = scrape(1)
    asyncio.run(go())
    after = scrape(2)
    values = {r["metric"]: r["value"] for r in after}
    # every token after a request's first came out of a step, each step modelled at 5 ms
    assert values["swarm_emulator_step_tokens_total"] == 4 * (6 - 1)
    assert values["swarm_emulator_step_model_seconds_total"] == pytest.approx(
        0.005 * values["swarm_emulator_steps_total"]
    )
    assert values["swarm_emulator_step_seconds_total"] > 0
    import pyarrow as pa

    figures = emulator_figures(pa.Table.from_pylist(before + after, schema=SCHEMA))
    # each of the 20 gaps spans whole 5 ms steps: one, or more where a later arrival's prefill
    # step paused the decodes (SGLang), as the client sees it
    assert figures is not None
    gap_steps = figures["model_itl_ms"] * 20 / 5.0
    assert gap_steps == pytest.approx(round(gap_steps)) and 20 <= round(gap_steps) <= 4 * (figures["steps"] - 1)
    assert figures["steps"] == values["swarm_emulator_steps_total"]


def test_the_report_says_when_the_emulator_could_not_keep_its_model(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from swarm.runtime.metrics_scraper import SCHEMA

    RunManifest(run_id="slow-emulator", status=RunStatus.COMPLETE).write(tmp_path)
    with ParquetTraceSink(tmp_path, writer="w") as sink:
        for i in range(50):
            sink.write(synthetic_record(i))
    rows = [
        {"target": "emulator-sglang", "engine": "sglang", "t_ns": t, "metric": m, "labels": "", "value": v * k}
        for k, t in ((1, 1_000), (2, 2_000))
        for m, v in (("swarm_emulator_steps_total", 100.0), ("swarm_emulator_step_model_seconds_total", 1.0),
                     ("swarm_emulator_step_seconds_total", 1.5), ("swarm_emulator_step_tokens_total", 800.0),
                     ("swarm_emulator_step_token_model_seconds_total", 8.0))
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), tmp_path / "server_metrics.parquet")
    report = build_report(load_run(tmp_path))
    emu = report["targets"]["emulator-sglang"]["server"]["emulator"]
    assert emu["step_overrun"] == pytest.approx(1.5) and emu["model_itl_ms"] == pytest.approx(10.0)
    assert any("could not keep its own model" in w and "1.50x" in w for w in report["warnings"])
