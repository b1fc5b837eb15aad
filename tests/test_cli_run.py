"""``swarm run`` end to end on loopback, and its bad-input handling."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from swarm.trace.manifest import RunManifest
from swarm.trace.reader import read_requests


def swarm(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarm", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def test_run_against_embedded_emulators_writes_both_traces(tmp_path: Path) -> None:
    out = swarm("run", "--agents", "8", "--topology", "chain", "--arrival", "all", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    run_dir = tmp_path / result["run_dir"]
    assert result["status"] == "complete"
    assert set(result["targets"]) == {"emulator-sglang", "emulator-trtllm"}
    manifest = RunManifest.read(run_dir)
    assert [t.engine for t in manifest.targets] == ["sglang", "trtllm"] and all(
        t.emulated for t in manifest.targets
    )
    assert manifest.spec_hash and manifest.seed == 0
    table = read_requests(run_dir)
    assert table.num_rows == 2 * 8 * 4 == sum(manifest.counts.values())
    assert set(table["target"].to_pylist()) == {"emulator-sglang", "emulator-trtllm"}
    assert table["output_text"].null_count == table.num_rows  # not recorded unless --record-text


def test_run_against_named_targets_and_text_summary(
    tmp_path: Path, emulator_process: Callable[..., object]
) -> None:
    a = emulator_process("--engine", "sglang", "--timing", "zero")
    b = emulator_process("--engine", "trtllm", "--timing", "zero")
    out = swarm(
        "run", "--agents", "5", "--topology", "react", "--arrival", "all", "--no-progress", "--record-text",
        "--target", f"sg={a.url}", "--target", f"trt={b.url}",  # type: ignore[attr-defined]
        "--output", "out", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "sg" in out.stdout and "trt" in out.stdout and "summary (from the trace)" in out.stdout
    (run_dir,) = list((tmp_path / "out").iterdir())
    table = read_requests(run_dir)
    assert table["output_text"].null_count == 0
    assert {t.engine for t in RunManifest.read(run_dir).targets} == {"sglang", "trtllm"}  # detected


def assert_refused(out: subprocess.CompletedProcess[str], needle: str, cwd: Path) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    assert needle in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert not (cwd / "runs").exists(), "a run folder was created before the input was checked"


@pytest.mark.parametrize(
    ("spec_text", "needle"),
    [
        ("workload:\n  agentz: 3\n", "spec.yaml (with flags): workload.agentz: unknown key"),
        ("workload:\n  agents: many\n", "workload.agents: Input should be a valid integer"),
        (
            "workload:\n  mix: [{topology: spiral}]\n",
            "spec.yaml (with flags): workload.mix.0.topology: unknown topology 'spiral'",
        ),
        (
            "workload:\n  mix: [{profile: math_reasoner}, {profile: wizard}]\n",
            "spec.yaml (with flags): workload.mix.1.profile: unknown agent profile 'wizard'",
        ),
        (
            "workload:\n  arrival: {process: poisson, rate: -2}\n",
            "workload.arrival.rate: Input should be greater than 0",
        ),
        ("colour: blue\n", "colour: unknown key"),
    ],
)
def test_bad_spec_is_refused_before_any_request(tmp_path: Path, spec_text: str, needle: str) -> None:
    (tmp_path / "spec.yaml").write_text(spec_text)
    assert_refused(swarm("run", "--spec", "spec.yaml", "--no-progress", cwd=tmp_path), needle, tmp_path)


def test_impossible_distribution_in_a_profile_names_file_and_field(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        "name: bad\ntask_tokens: {dist: lognormal, median: -5, sigma: 1}\n"
        "output_tokens: {default: {dist: uniform, low: 9, high: 3}}\n"
    )
    out = swarm("run", "--profile", "bad.yaml", "--no-progress", cwd=tmp_path)
    assert_refused(out, "bad.yaml: task_tokens.lognormal.median: Input should be greater than 0", tmp_path)
    assert (
        "bad.yaml: output_tokens.default.uniform: Value error, low (9.0) is greater than high (3.0)"
        in out.stderr
    )


def test_bad_target_flags(tmp_path: Path) -> None:
    assert_refused(swarm("run", "--target", "nourl", cwd=tmp_path), "expected NAME=URL", tmp_path)
    assert_refused(
        swarm("run", "--target", "a=http://127.0.0.1:1", cwd=tmp_path),
        "swarm: error: connection refused at http://127.0.0.1:1",
        tmp_path,
    )
    assert_refused(
        swarm("run", "--target", "a=http://127.0.0.1:1", "--engine", "tgi", cwd=tmp_path),
        "unknown engine profile 'tgi'",
        tmp_path,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--profile", "wizard"], "--profile: unknown agent profile 'wizard'"),
        (["--topology", "spiral"], "--topology: unknown topology 'spiral'"),
        (["--target", "a=http://127.0.0.1:1"], "connection refused at http://127.0.0.1:1"),
    ],
)
def test_bad_input_is_told_before_any_live_table(tmp_path: Path, args: list[str], needle: str) -> None:
    out = swarm("run", *args, cwd=tmp_path)  # the live view is on (the default)
    assert_refused(out, needle, tmp_path)
    assert "┏" not in out.stdout + out.stderr and "swarm run" not in out.stdout  # no table drawn


def metric(url: str, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.split()[-1])
    return 0.0


def _answered_or_slow(url: str) -> float:
    """The requests the server has answered, or 0 when its metrics page is slow to come (a
    server busy with 2,000 agents on a machine held by a CPU hog took over 5 s once): the
    caller polls again until its deadline."""
    try:
        return metric(url, "sglang:num_requests_total")
    except OSError:  # a timeout (TimeoutError, or URLError around it) or a refused connection
        return 0.0


@pytest.mark.parametrize("executor", ["ray", "inprocess"])
def test_sigint_leaves_readable_trace_and_interrupted_manifest(
    tmp_path: Path, emulator_process: Callable[..., object], executor: str
) -> None:
    emu = emulator_process(
        "--engine", "sglang", "--timing", "fixed", "--first-token-ms", "20", "--token-ms", "20"
    )
    url = emu.url  # type: ignore[attr-defined]
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm", "run", "--agents", "2000", "--arrival", "constant:50", "--no-progress",
         "--executor", executor, "--target", f"s={url}", "--target", f"t={url}", "--engine", "sglang", "--json"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    # interrupt once the server has answered a few hundred requests (Ray takes seconds to start)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and _answered_or_slow(url) < 300:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    (run_dir,) = list((tmp_path / "runs").iterdir())
    manifest = RunManifest.read(run_dir)
    assert manifest.status.value == "interrupted"
    table = read_requests(run_dir)
    statuses = table["status"].to_pylist()
    assert table.num_rows >= 300 and "ok" in statuses and "cancelled" in statuses
    assert sum(manifest.counts.values()) == table.num_rows
    # counts that mean what they say: cancelled requests are not errors, the sessions the stop
    # cut are counted, and the target that never ran is named
    s, t = manifest.targets
    assert (s.outcome, t.outcome) == ("interrupted", "not_run")
    assert s.sessions_planned == t.sessions_planned == 2000 and s.sessions_cut > 0 and t.sessions_started == 0
    assert s.sessions_finished + s.sessions_cut == s.sessions_started
    assert "not run: t" in (manifest.status_reason or "")
    summary = json.loads(out)
    assert summary["not_run"] == ["t"] and list(summary["targets"]) == ["s"]
    row = summary["targets"]["s"]
    assert row["cancelled"] == statuses.count("cancelled") > 0
    assert row["errors"] == len(statuses) - statuses.count("ok") - statuses.count("cancelled")


@pytest.mark.slow
def test_default_run_is_the_showdown_of_the_study_and_the_recordings(tmp_path: Path) -> None:
    """`swarm run` with no flags: the showdown (the study's tree of thought beside Claude Code
    sessions started mid-life) against both profiles, a window each; the sessions' warm-ups are
    marked and in no figure. (How long it takes and whether it kept its schedule are
    magnitudes: bench default-run.)"""
    from swarm.analysis.report import build_run_report, load_run
    from swarm.trace.reader import read_requests
    from swarm.workload.showdown import SHOWDOWN_DURATION_S, SHOWDOWN_WORKLOAD

    start = time.monotonic()
    out = swarm("run", "--json", cwd=tmp_path, timeout=600)
    elapsed = time.monotonic() - start
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    run_dir = tmp_path / result["run_dir"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["spec"]["duration_s"] == SHOWDOWN_DURATION_S
    assert [e["profile"] for e in manifest["spec"]["workload"]["mix"]] == ["tree_of_thought", "claude_code"]
    for t in manifest["targets"]:
        assert t["outcome"] == "complete" and t["sessions_planned"] == SHOWDOWN_WORKLOAD["agents"]
    rows = read_requests(run_dir, ["target", "profile", "warmup", "status", "max_tokens"]).to_pylist()
    warm = [r for r in rows if r["warmup"]]
    assert warm and all(r["profile"] == "claude_code" and r["max_tokens"] == 1 for r in warm)
    assert all(r["status"] == "ok" for r in rows)
    report = build_run_report(load_run(run_dir))
    for name in ("emulator-sglang", "emulator-trtllm"):
        figures = report.targets[name].figures
        mine = [r for r in rows if r["target"] == name]
        assert figures.requests == len([r for r in mine if not r["warmup"]]) == result["targets"][name]["requests"]
        assert {b.value for b in report.targets[name].breakdowns["profile"]} == {"tree_of_thought", "claude_code"}
    print(f"default run: {elapsed:.0f} s; {len(rows)} rows, {len(warm)} warm-ups")


def test_an_in_process_part_puts_back_the_handler_it_found() -> None:
    """After an in-process target (or a replay) the CLI's SIGTERM handler is in place again:
    asyncio's own removal would leave the default action, and a SIGTERM between targets would
    kill the run without writing its manifest."""
    from swarm.runtime.executor import run_with_signals

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:

        async def part() -> int:
            return 7

        assert run_with_signals(part, lambda: None) == 7
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, previous)
