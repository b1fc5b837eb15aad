"""kill -9 of a running ``swarm run``: the run folder still reads, and says what was lost.

The driver writes the trace itself (in-process executor) and closes a part at least every
0.5 s. After SIGKILL: every closed part reads, the trace covers the run up to about one flush
interval before the kill, the report warns that the run never finished and names the
unfinished part, and the embedded emulators do not outlive their parent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sending import STEADY_PROFILE

from swarm.analysis.report import build_report, load_run
from swarm.trace.manifest import RunManifest, RunStatus
from swarm.trace.reader import list_parts, read_requests, unfinished_parts

FLUSH_S = 0.5


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


@pytest.mark.slow
def test_kill_9_of_the_driver_loses_at_most_the_last_flush_interval(tmp_path: Path) -> None:
    (tmp_path / "steady.yaml").write_text(STEADY_PROFILE)
    out = tmp_path / "runs"
    cmd = [
        sys.executable, "-m", "swarm", "run", "--executor", "inprocess", "--no-progress",
        "--profile", str(tmp_path / "steady.yaml"), "--topology", "chain", "--agents", "100000",
        "--arrival", "constant:40", "--flush-interval", str(FLUSH_S), "--output", str(out),
        "--emulator-arg=--timing=fixed", "--emulator-arg=--first-token-ms=5", "--emulator-arg=--token-ms=2",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        requests_dir: Path | None = None
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            runs = list(out.iterdir()) if out.exists() else []
            if runs and (runs[0] / "requests").exists():
                requests_dir = runs[0] / "requests"
                if len(list(requests_dir.glob("*.parquet"))) >= 4:
                    break
            time.sleep(0.1)
        else:
            pytest.fail("the run did not close 4 parts within 90 s")
        emulators = _children(proc.pid)
        assert emulators, "the embedded emulators run as child processes"
        time.sleep(0.3)  # mid-interval: some rows are in an unclosed part
        killed_at_ns = time.time_ns()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        if proc.stderr is not None:
            proc.stderr.close()
    assert requests_dir is not None
    run_dir = requests_dir.parent

    # every closed part reads on its own, and together
    parts = list_parts(run_dir)
    assert len(parts) >= 4
    rows = 0
    for part in parts:
        rows += pq.read_table(part).num_rows
    table = read_requests(run_dir)
    assert table.num_rows == rows > 0
    assert len(set(table["request_id"].to_pylist())) == rows  # nothing twice

    # at most about one flush interval lost: the trace reaches to within it of the kill
    ends = [s + e for s, e in zip(table["sent_ns"].to_pylist(), table["e2e_ns"].to_pylist(), strict=True)]
    gap_s = (killed_at_ns - max(ends)) / 1e9
    assert gap_s < FLUSH_S + 1.0, gap_s

    # the reader says what happened, and what was lost
    manifest = RunManifest.read(run_dir)
    assert manifest.status is RunStatus.RUNNING and manifest.finished_at is None
    torn = unfinished_parts(run_dir)
    report = build_report(load_run(run_dir))
    assert any("never finished" in w for w in report["warnings"])
    if torn:
        assert any(f"{len(torn)} unfinished trace part(s)" in w for w in report["warnings"])
    cli = subprocess.run(
        [sys.executable, "-m", "swarm", "report", str(run_dir)], capture_output=True, text=True, timeout=120
    )
    assert cli.returncode == 0, cli.stderr
    assert "never finished" in cli.stdout

    # the embedded emulators notice their parent is gone and stop
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(p) for p in emulators):
        time.sleep(0.2)
    assert not any(_alive(p) for p in emulators)
