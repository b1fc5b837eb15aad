"""`swarm sweep` end to end (issue 16): the ladder, the sweep folder and its manifest, resuming
after a kill, replays and Ray as point sources, `swarm report` / `swarm compare` on sweep
folders, and the emulators' eviction cliff against the working-set prediction.

Sweeps here use tiny agents against emulators on loopback. Assertions are about what the sweep
records and decides (which points ran, where, with which load and seed; the cliff's place
against the prediction), never about how fast anything ran.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_sweep_analysis import _streamed, _table

from swarm.emulator.http_server import EmulatorThread
from swarm.errors import InputError
from swarm.runtime.executor import InProcessExecutor
from swarm.runtime.specs import RunSpec, TargetSpec
from swarm.sweep.manifest import SweepManifest
from swarm.sweep.point_figures import point_figures, point_validity, whole_run_window
from swarm.sweep.points import AgentPoints, ReplayPoints
from swarm.sweep.report import PointResult, build_sweep_report
from swarm.sweep.runner import SweepEvent, execute_sweep, stop_rule
from swarm.sweep.spec import AutoLadder, StopRules, SweepSpec
from swarm.sweep.working_set import predicted_cliff_load, working_set
from swarm.trace.manifest import RunManifest
from swarm.workload.catalog import Catalog

SWARM = [sys.executable, "-m", "swarm.cli"]

#: a chain of short calls with a tool wait between them: each agent lives for about a second
TINY = """\
name: tiny
description: 60-token shared prompt, short turns
system_prompt: {style: prose, tokens: 60}
task_tokens: {dist: constant, value: 30}
instruction_tokens: {dist: constant, value: 5}
output_tokens: {default: {dist: constant, value: 4}}
think_time_s: {dist: constant, value: 0}
tool_time_s: {dist: constant, value: 0.2}
tool_result_tokens: {dist: constant, value: 20}
"""

#: the cliff test's agent: a short shared prompt, long private context (react, 4 steps)
CLIFF_AGENT = """\
name: cliff_agent
description: 200-token shared prompt; tool observations make each session's own context dominate
system_prompt: {style: tool_catalogue, tokens: 200, tools: 4}
task_tokens: {dist: constant, value: 200}
instruction_tokens: {dist: constant, value: 10}
output_tokens: {default: {dist: constant, value: 20}}
think_time_s: {dist: constant, value: 0.05}
tool_time_s: {dist: constant, value: 0.2}
tool_result_tokens: {dist: constant, value: 250}
"""


def _spec(folder: Path, agents_yaml: str = TINY, **workload: Any) -> RunSpec:
    name = agents_yaml.split("\n", 1)[0].removeprefix("name: ").strip()
    (folder / f"{name}.yaml").write_text(agents_yaml)
    data = {
        "system_prompts": 1, "mix": [{"profile": str(folder / f"{name}.yaml"), "topology": "chain"}],
        "arrival": {"process": "all_at_once"}, **workload,
    }  # fmt: skip
    return RunSpec.model_validate({"workload": data, "metrics_interval_s": 0.2})


def _sweep(out: Path, loads: list[float], **fields: Any) -> SweepSpec:
    return SweepSpec(knob="agents", loads=loads, output=str(out), **fields)


# --- the ladder and the stop rules -------------------------------------------------------------


def test_auto_ladder_grows_geometrically_within_its_limits() -> None:
    ladder = AutoLadder(start=3, factor=2, max_points=5, max_load=40)
    assert [ladder.load(i, integer=True) for i in range(6)] == [3, 6, 12, 24, None, None]
    # whole-number knobs always grow, even by a factor that rounds to the same count
    slow = AutoLadder(start=1, factor=1.2, max_points=4)
    assert [slow.load(i, integer=True) for i in range(4)] == [1, 2, 3, 4]
    assert AutoLadder(start=0.5, factor=3, max_points=3).load(2, integer=False) == pytest.approx(4.5)


def test_sweep_spec_rejects_ladders_that_cannot_be_run() -> None:
    with pytest.raises(ValueError, match="either a fixed ladder"):
        SweepSpec(knob="agents")
    with pytest.raises(ValueError, match="either a fixed ladder"):
        SweepSpec(knob="agents", loads=[1], auto=AutoLadder(start=1))
    with pytest.raises(ValueError, match="ascending"):
        SweepSpec(knob="agents", loads=[4, 2])
    with pytest.raises(ValueError, match="whole numbers"):
        SweepSpec(knob="agents", loads=[1.5])
    assert SweepSpec(knob="rate", loads=[0.5, 1.5]).load(1) == 1.5


def _result(load: float, ttft_ms: float, tokens: int, lag_ms: float = 0.0, status: str = "ok") -> PointResult:
    """One point of 10 requests, one per second, each ``tokens`` long with the given TTFT."""
    rows = [
        _streamed(
            i,
            ttft_ms,
            [5.0] * (tokens - 1),
            tokens,
            status=status,
            queue_ns=int(lag_ms * 1e6),
            session_id=f"s{i}",
            prompt_tokens=10,
            cached_tokens=0,
            prompt_tokens_est=10,
            ideal_cached_tokens_est=0,
        )
        for i in range(10)
    ]
    table = _table(rows)
    window = whole_run_window(table)
    figures = point_figures(table, window)
    return PointResult(
        index=0, load=load, target="a", run_dir="", figures=figures, whole=figures,
        validity=point_validity(figures, max_error_rate=0.05), engine={}, working=None,
    )  # fmt: skip


def test_stop_rules_fire_on_errors_lateness_slo_and_a_flat_throughput() -> None:
    from swarm.analysis.metrics import SLO

    rules = StopRules(max_error_rate=0.05, slo_factor=2.0, min_gain=0.05)
    slo = SLO(ttft_ms=100.0)
    rising = [_result(1, 50, 10), _result(2, 60, 20)]
    assert stop_rule(rising, rules, slo, "p99") is None
    flat = [_result(1, 50, 10), _result(2, 50, 10)]
    assert "no longer rising" in (stop_rule(flat, rules, slo, "p99") or "")
    slow = [_result(1, 50, 10), _result(2, 250, 20)]  # 250 ms > 2 x 100 ms
    assert "ttft_ms.p99" in (stop_rule(slow, rules, slo, "p99") or "")
    assert stop_rule([_result(1, 150, 10)], rules, slo, "p99") is None  # above the SLO, below 2x
    late = [_result(1, 50, 10, lag_ms=30)]
    assert "behind its schedule" in (stop_rule(late, rules, None, "p99") or "")
    failing = [_result(1, 50, 10, status="http_error")]
    assert "error share" in (stop_rule(failing, rules, None, "p99") or "")


def test_working_set_and_predicted_cliff_from_a_hand_built_trace() -> None:
    """Three sessions; the first sends the 100-token shared prompt first (its opening finds
    nothing cached), the other two find it. Rows: prompt + completion = context.

    s0: contexts 110+10, 150+10 -> private (120-100, 160-100) = 20, 60 -> mean 40
    s1: 130+10 -> private 40;  s2: 110+30 -> private 40.  per session = 40; shared = 1 x 100.
    Budget 1,000 tokens: (1000 - 100) / 40 = 22.5 live sessions."""
    rows = [
        _streamed(0, 5, [1.0] * 9, 10, session_id="s0", prompt_tokens_est=110, ideal_cached_tokens_est=0),
        _streamed(1, 5, [1.0] * 9, 10, session_id="s0", prompt_tokens_est=150, ideal_cached_tokens_est=120),
        _streamed(2, 5, [1.0] * 9, 10, session_id="s1", prompt_tokens_est=130, ideal_cached_tokens_est=100),
        _streamed(3, 5, [1.0] * 29, 30, session_id="s2", prompt_tokens_est=110, ideal_cached_tokens_est=100),
    ]
    ws = working_set(_table(rows))
    assert ws is not None
    assert (ws.sessions, ws.shared_tokens, ws.per_session_tokens) == (3, 100.0, 40.0)
    assert predicted_cliff_load(ws, 1000) == pytest.approx(22.5)


# --- a sweep in this process ---------------------------------------------------------------


@pytest.fixture
def sglang(emulator: Callable[..., EmulatorThread]) -> TargetSpec:
    return TargetSpec(
        name="emu", url=emulator(engine="sglang", timing="fixed", first_token_ms=5, token_ms=2).url
    )


def test_sweep_runs_every_load_with_one_seed_and_resumes_without_rerunning(
    sglang: TargetSpec, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, seed=7)
    out = tmp_path / "sweep"
    events: list[SweepEvent] = []
    result = execute_sweep(
        _sweep(out, [1, 2]), AgentPoints(spec), [sglang], InProcessExecutor(), on_event=events.append
    )
    manifest = SweepManifest.read(str(out))
    assert manifest.status == "complete" and manifest.knob == "agents" and manifest.seed == 7
    runs = manifest.done_runs()
    assert [(r.index, r.load, r.target) for r in runs] == [(0, 1.0, "emu"), (1, 2.0, "emu")]
    for r in runs:
        run = RunManifest.read(out / r.run_dir)
        assert run.seed == 7  # like for like: one seed at every point
        assert run.spec["workload"]["agents"] == int(r.load)
        assert [t.name for t in run.targets] == ["emu"]
        assert r.cache_reset == "POST /swarm/flush_cache"
    assert [e.kind for e in events] == ["start", "done", "start", "done"]
    assert [len(v) for v in result.results.values()] == [2]

    # the same command again: nothing runs, every point is read back
    again: list[SweepEvent] = []
    execute_sweep(
        _sweep(out, [1, 2]), AgentPoints(spec), [sglang], InProcessExecutor(), on_event=again.append
    )
    assert [e.kind for e in again] == ["skip", "skip"]
    assert len(SweepManifest.read(str(out)).points) == 2

    # a longer ladder in the same folder is another sweep: refused, naming the folder
    with pytest.raises(InputError, match="holds another sweep"):
        execute_sweep(_sweep(out, [1, 2, 4]), AgentPoints(spec), [sglang], InProcessExecutor())

    report = build_sweep_report(out)
    points = report["targets"]["emu"]["points"]
    assert [p["load"] for p in points] == [1.0, 2.0]
    assert all(p["figures"]["requests"] > 0 for p in points)
    assert points[0]["window"]["rule"] and "whole_run" in points[0]


def test_sweep_over_replayed_sessions_sets_the_closed_loop_per_point(
    sglang: TargetSpec, tmp_path: Path
) -> None:
    from swarm.launch import execute_run
    from swarm.runtime.specs import ReplaySpec

    spec = _spec(tmp_path, agents=4)
    spec.targets, spec.output_dir = [sglang], str(tmp_path / "runs")
    recorded = execute_run(spec)
    out = tmp_path / "replay-sweep"
    launcher = ReplayPoints(ReplaySpec(replay={"source": recorded.run_dir, "mode": "dependent"}))
    execute_sweep(
        SweepSpec(knob="max_sessions", loads=[1, 2], output=str(out)), launcher, [sglang], InProcessExecutor()
    )
    runs = SweepManifest.read(str(out)).done_runs()
    assert [RunManifest.read(out / r.run_dir).replay_of["max_sessions"] for r in runs] == [1, 2]  # type: ignore[index]
    with pytest.raises(InputError, match="replay sweep's knob"):
        execute_sweep(
            SweepSpec(knob="agents", loads=[1], output=str(tmp_path / "x")),
            launcher,
            [sglang],
            InProcessExecutor(),
        )


def test_ray_workers_are_started_once_for_the_whole_sweep(
    ray_cluster: None, sglang: TargetSpec, tmp_path: Path
) -> None:
    from swarm.cluster.executor import RayExecutor

    out = tmp_path / "ray-sweep"
    executor = RayExecutor(workers=1, keep_workers=True)
    execute_sweep(_sweep(out, [1, 2]), AgentPoints(_spec(tmp_path)), [sglang], executor)
    runs = SweepManifest.read(str(out)).done_runs()
    pids = [[w.pid for w in RunManifest.read(out / r.run_dir).workers] for r in runs]
    assert len(pids) == 2 and len(pids[0]) == 1
    assert pids[0] == pids[1]  # the same actor ran both points
    assert executor._pool == []  # and ended with the sweep


# --- the command line: kill and resume, report, compare -------------------------------------


def _sweep_cli(url: str, folder: Path, out: Path, *extra: str) -> list[str]:
    (folder / "tiny.yaml").write_text(TINY)
    return [
        *SWARM, "sweep", "--target", f"emu={url}", "--engine", "sglang", "--ladder", "agents=1,2,3",
        "--profile", str(folder / "tiny.yaml"), "--topology", "chain", "--arrival", "all_at_once",
        "--executor", "inprocess", "--output", str(out), *extra,
    ]  # fmt: skip


def test_a_killed_sweep_resumes_with_only_its_missing_points(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    url = emulator(engine="sglang", timing="fixed", first_token_ms=5, token_ms=2).url
    out = tmp_path / "killed"
    command = _sweep_cli(url, tmp_path, out)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    done_before: dict[int, str] = {}
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "sweep.json").exists():
                try:
                    manifest = SweepManifest.read(str(out))
                except (InputError, FileNotFoundError):
                    manifest = None  # between the write of a temp file and its rename
                if manifest is not None and manifest.done_runs():
                    done_before = {r.index: r.run_dir for r in manifest.done_runs()}
                    break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert done_before, "the sweep finished no point before the deadline"
    killed = SweepManifest.read(str(out))
    assert killed.status == "running"  # it never got to say otherwise
    if len(killed.done_runs()) == 3:
        pytest.skip("the sweep finished every point before the kill landed")

    resumed = subprocess.run([*command, "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    manifest = SweepManifest.read(str(out))
    assert manifest.status == "complete"
    done = {r.index: r.run_dir for r in manifest.done_runs()}
    assert sorted(done) == [0, 1, 2]
    for index, run_dir in done_before.items():
        assert done[index] == run_dir  # not run again
    attempts = {i: [p for p in manifest.points if p.index == i] for i in range(3)}
    assert all(len(attempts[i]) == 1 for i in done_before)
    assert "skipped" in resumed.stderr
    report = json.loads(resumed.stdout)
    assert [p["load"] for p in report["targets"]["emu"]["points"]] == [1.0, 2.0, 3.0]


def test_report_and_compare_read_sweep_folders(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    # a first token slow enough (60 ms) that a busy machine's late reads (a few ms) leave the
    # points valid: a point whose client read later than 5 % of its TTFT p50 is not on the curves
    a_url = emulator(engine="sglang", timing="fixed", first_token_ms=60, token_ms=2).url
    b_url = emulator(engine="trtllm", timing="fixed", first_token_ms=60, token_ms=2).url
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    folders = []
    for name, url, engine in (("a", a_url, "sglang"), ("b", b_url, "trtllm")):
        out = tmp_path / f"sweep-{name}"
        command = _sweep_cli(url, tmp_path, out, "--slo", "ttft:5s")
        command[command.index("--engine") + 1] = engine
        command[command.index("--ladder") + 1] = "agents=1,2"
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        folders.append(str(out))
    shown = subprocess.run([*SWARM, "report", folders[0]], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "steady-window figures by agents" in shown.stdout and "capacity at SLO" in shown.stdout
    html = tmp_path / "sweep.html"
    as_json = subprocess.run(
        [*SWARM, "report", folders[0], "--json", "--html", str(html)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(as_json.stdout)
    assert report["sweep"]["slos"] == ["ttft:5s"]
    capacity = report["targets"]["emu"]["capacity"]
    assert capacity["limiting"] is None, capacity  # no point fails a 5 s TTFT
    late = [p for p in report["targets"]["emu"]["points"] if p["late_only"]]
    if not late:  # a busy machine may leave the generator or the client late: no valid point
        assert capacity["at_least"] is True, capacity
    else:
        assert capacity["at_least"] is True or capacity["load"] is None, capacity
    if capacity["load"] is not None:  # a valid point to draw
        assert "<svg" in html.read_text()
    compared = subprocess.run(
        [*SWARM, "compare", *folders, "--json"], capture_output=True, text=True, timeout=120
    )
    assert compared.returncode == 0, compared.stderr
    result = json.loads(compared.stdout)
    assert list(result["series"]) == ["sweep-a:emu", "sweep-b:emu"]
    assert [row["load"] for row in result["by_load"]] == [1.0, 2.0]
    capacities = {k: s["capacity"] for k, s in result["series"].items()}
    if all(c["load"] is not None for c in capacities.values()):  # a busy machine may leave none valid
        assert "sweep-b:emu / sweep-a:emu" in result["capacity_ratios"], capacities
    else:
        assert result["capacity_ratios"] == {}, capacities
    mixed = subprocess.run(
        [*SWARM, "compare", folders[0], str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert mixed.returncode == 2 and "sweep folders with sweep folders" in mixed.stderr


# --- the emulators' eviction cliff -------------------------------------------------------------


def test_emulator_cliff_lies_within_one_ladder_step_of_the_working_set_prediction(tmp_path: Path) -> None:
    """Both emulator profiles with a 6,000-token prefix cache, agents 2 to 16 (factor 2).

    Each agent: a 200-token shared prompt, then 4 react steps whose context grows by its
    output and a 250-token observation. The report predicts the cliff from the working set at
    the lowest point (shared + N x mean private context = budget) and finds it where realised /
    ideal hit falls below half its low-load value; the two must lie within one ladder step
    (a factor of 2) of each other. Agents arrive 10 ms apart, so the generator never has a
    burst to fall behind on."""
    spec = _spec(tmp_path, CLIFF_AGENT, arrival={"process": "constant", "rate": 100})
    spec.workload.mix[0].topology = "react"
    out = tmp_path / "cliff"
    execute_sweep(
        _sweep(out, [2, 4, 8, 16]), AgentPoints(spec, Catalog()), [], InProcessExecutor(),
        emulator_args=["--cache-tokens=6000"],
    )  # fmt: skip
    report = build_sweep_report(out)
    assert report["sweep"]["kv_budget_tokens"] == 6000
    for name in ("emulator-sglang", "emulator-trtllm"):
        target = report["targets"][name]
        cliff, predicted = target["cliff"], target["predicted_cliff"]
        hits = {p["load"]: p["figures"].get("hit_vs_ideal") for p in target["points"]}
        assert cliff is not None, f"{name}: no cliff in {hits}"
        assert predicted is not None and predicted["load"] is not None
        steps = abs(math.log2(cliff["load"] / predicted["load"]))
        assert steps <= 1.0, (
            f"{name}: cliff {cliff['load']:.3g} vs predicted {predicted['load']:.3g} ({hits})"
        )
        lowest = target["points"][0]["figures"]
        assert lowest["hit_vs_ideal"] > 0.9  # below the budget, the engine reuses what the ideal does


def test_a_target_that_fails_stops_alone_and_the_report_says_so(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    """Two targets; the second stops answering after the first point. The sweep goes on with the
    first, records the second as failed at the next load, ends ``stopped``, and its report
    warns; a run folder deleted afterwards is a warning too, not a crash."""
    good = TargetSpec(
        name="good", url=emulator(engine="sglang", timing="fixed", first_token_ms=5, token_ms=2).url
    )
    dying = emulator(engine="sglang", timing="fixed", first_token_ms=5, token_ms=2)
    bad = TargetSpec(name="dying", url=dying.url, engine="sglang")
    out = tmp_path / "sweep"

    def on_event(event: SweepEvent) -> None:
        if event.kind == "done" and event.target == "dying":
            dying.stop()  # gone before the next point

    result = execute_sweep(
        _sweep(out, [1, 2]), AgentPoints(_spec(tmp_path)), [good, bad], InProcessExecutor(), on_event=on_event
    )
    manifest = SweepManifest.read(str(out))
    assert manifest.status == "stopped" and "dying failed at agents=2" in (manifest.status_reason or "")
    assert [(r.index, r.target) for r in manifest.done_runs()] == [(0, "good"), (0, "dying"), (1, "good")]
    assert manifest.latest(1, "dying").status == "failed"  # type: ignore[union-attr]
    assert len(result.results["good"]) == 2
    report = build_sweep_report(out)
    assert any("dying at 2: the point failed" in w for w in report["warnings"])
    shutil.rmtree(out / manifest.done_runs()[0].run_dir)
    report = build_sweep_report(out)
    assert [p["load"] for p in report["targets"]["good"]["points"]] == [2.0]
    assert any("is gone" in w for w in report["warnings"])


def test_sweep_json_holds_no_credentials(sglang: TargetSpec, tmp_path: Path) -> None:
    """A target URL with a user and password is written to the sweep manifest without them (the
    run manifests redact it too)."""
    secret = TargetSpec(
        name="emu", url=sglang.url.replace("http://", "http://alice:hunter2@"), engine="sglang"
    )
    out = tmp_path / "s"
    try:
        execute_sweep(_sweep(out, [1]), AgentPoints(_spec(tmp_path)), [secret], InProcessExecutor())
    except InputError:
        pass  # whether the target takes credentials in its URL is not the point here
    text = (out / "sweep.json").read_text()
    assert "hunter2" not in text and "127.0.0.1" in text


def test_sweep_command_line_refuses_flags_that_do_not_apply_and_reads_spec_targets(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}

    def sweep(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SWARM, "sweep", *args], capture_output=True, text=True, env=env, timeout=300)

    refused = sweep("--replay", str(tmp_path), "--ladder", "max_sessions=1", "--seed", "3")
    assert refused.returncode == 2 and "--seed apply to agent swarms" in refused.stderr
    refused = sweep("--copies", "2")
    assert refused.returncode == 2 and "--copies apply with --replay only" in refused.stderr
    refused = sweep("--ladder", "cache=1,2")
    assert refused.returncode == 2 and "KNOB one of agents, max_in_flight, rate" in refused.stderr
    refused = sweep("--ladder", "agents=1,x")
    assert refused.returncode == 2 and "expected numbers separated by commas" in refused.stderr
    refused = sweep("--agents", "1,2")  # the base's agents: a ladder is --ladder agents=1,2
    assert refused.returncode == 2 and "--agents" in refused.stderr
    refused = sweep("--factor", "3")
    assert refused.returncode == 2 and "--factor apply with --auto only" in refused.stderr

    url = emulator(engine="sglang", timing="fixed", first_token_ms=5, token_ms=2).url
    (tmp_path / "tiny.yaml").write_text(TINY)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(
        f"targets: [{{name: emu, url: '{url}', engine: sglang}}]\n"
        f"workload: {{mix: [{{profile: '{tmp_path / 'tiny.yaml'}', topology: chain}}], arrival: {{process: all_at_once}}}}\n"
    )
    done = sweep(
        "--spec", str(spec_file), "--ladder", "agents=1", "--executor", "inprocess",
        "--output", str(tmp_path / "from-spec"), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = SweepManifest.read(str(tmp_path / "from-spec"))
    assert manifest.targets == ["emu"]  # the spec's target, not the emulated showdown

    # a rate ladder without --arrival gets arrivals with a rate (the default is all at once)
    done = sweep(
        "--target", f"emu={url}", "--engine", "sglang", "--ladder", "rate=5", "--profile", str(tmp_path / "tiny.yaml"),
        "--topology", "chain", "--duration", "1", "--executor", "inprocess", "--output", str(tmp_path / "rate"),
        "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = SweepManifest.read(str(tmp_path / "rate")).done_runs()
    arrival = RunManifest.read(tmp_path / "rate" / run.run_dir).spec["workload"]["arrival"]
    assert (arrival["process"], arrival["rate"]) == ("poisson", 5.0)


def test_a_sweep_with_repeats_runs_each_point_over_and_reports_intervals(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    """``swarm sweep --repeat 3``: every point's run holds three repeats of its target, and the
    report pools them and gives each headline figure a 95 % interval over them."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    url = emulator(engine="sglang", timing="fixed", first_token_ms=5, token_ms=2).url
    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / "repeated"
    done = subprocess.run(
        [
            *SWARM, "sweep", "--target", f"emu={url}", "--engine", "sglang", "--ladder", "agents=2",
            "--profile", str(tmp_path / "tiny.yaml"), "--topology", "chain", "--repeat", "3",
            "--executor", "inprocess", "--output", str(out), "--json",
        ],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = SweepManifest.read(str(out)).done_runs()
    assert RunManifest.read(out / run.run_dir).repeats == 3
    (point,) = build_sweep_report(out)["targets"]["emu"]["points"]
    assert point["repeats"] == 3
    ttft = point["intervals"]["ttft_ms.p50"]
    assert ttft["units"] == "repeats" and ttft["n"] == 3
    assert ttft["low"] <= point["figures"]["ttft_ms.p50"] <= ttft["high"]
    shown = subprocess.run([*SWARM, "report", str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "repeats" in shown.stdout and "[" in shown.stdout  # figures printed with their intervals
    compared = subprocess.run(
        [*SWARM, "compare", str(out), str(out), "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    assert compared.returncode == 0, compared.stderr[-2000:]
    (by_load,) = json.loads(compared.stdout)["by_load"]
    for series in by_load["series"].values():  # each sweep's point with its interval
        assert series["intervals"]["ttft_ms.p99"]["n"] == 3
