"""What SGLang's router adds to a request: the same swarm sent to one emulator directly and
through ``sglang-router`` in front of it, TTFT p50 and p99 of each.

One emulator with fixed timing (every request's first token after ``FIRST_TOKEN_MS``, then one
token per ``TOKEN_MS``, whatever the load), so a difference between the two targets is the
router's: its HTTP hop, its policy, its proxying of the stream. One ``swarm run`` with both
targets, in process, ``AGENTS`` support agents starting as a Poisson process; the router runs
``round_robin`` over its one worker. Needs ``pip install sglang-router``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import Row

FIRST_TOKEN_MS = 20.0
TOKEN_MS = 5.0
AGENTS = 60
ARRIVAL = "poisson:6"
DURATION_S = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy_workers(url: str) -> int:
    """How many workers the router at ``url`` lists healthy (-1: it does not answer yet)."""
    try:
        with urllib.request.urlopen(url + "/workers", timeout=2) as resp:
            data = json.loads(resp.read())
    except (OSError, ValueError):
        return -1
    workers = data.get("workers", []) if isinstance(data, dict) else []
    return sum(1 for w in workers if isinstance(w, dict) and w.get("is_healthy"))


@contextlib.contextmanager
def sglang_router(workers: list[str], policy: str, log_path: Path, timeout_s: float = 60) -> Iterator[str]:
    """SGLang's router (``sglang-router``) on free loopback ports, its Prometheus listener on
    loopback too, in front of ``workers`` with ``policy``: its URL once it lists every worker
    healthy, until the block ends; then its whole process group is stopped (the bench case and
    the fleet tests share it)."""
    port = free_port()
    args = [
        sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), "--policy", policy,
        "--worker-urls", *workers, "--log-level", "warn",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while _healthy_workers(url) < len(workers):
            if proc.poll() is not None:
                raise RuntimeError(f"the router exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the router did not list {len(workers)} healthy workers in {timeout_s:.0f} s")
            time.sleep(0.2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def measure() -> dict[str, Any]:
    from swarm.emulator.process import EmulatorProcess

    emulator_args = ["--engine", "sglang", "--timing", "fixed", f"--first-token-ms={FIRST_TOKEN_MS}", f"--token-ms={TOKEN_MS}"]
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmulatorProcess(emulator_args) as emulator,
        sglang_router([emulator.url], "round_robin", Path(tmp) / "router.log") as routed,
    ):
        out = subprocess.run(
            [sys.executable, "-m", "swarm", "run", "--json", "--no-progress", "--executor", "inprocess",
             "--target", f"direct={emulator.url}", "--target", f"routed={routed}", "--engine", "sglang",
             "--profile", "support_agent", "--agents", str(AGENTS), "--arrival", ARRIVAL, "--duration", str(DURATION_S),
             "--seed", "1", "-o", os.path.join(tmp, "runs")],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if out.returncode not in (0, 1, 3):
            raise RuntimeError(f"swarm run failed ({out.returncode}): {out.stderr[-2000:]}")
        (folder,) = [os.path.join(tmp, "runs", d) for d in os.listdir(os.path.join(tmp, "runs"))]
        report = subprocess.run(
            [sys.executable, "-m", "swarm", "report", folder, "--json"], capture_output=True, text=True, timeout=300
        )
        if report.returncode != 0:
            raise RuntimeError(f"swarm report failed ({report.returncode}): {report.stderr[-2000:]}")
    targets = json.loads(report.stdout)["targets"]
    return {name: targets[name]["figures"] for name in ("direct", "routed")}


def run() -> list[Row]:
    figures = measure()
    direct, routed = figures["direct"], figures["routed"]
    valid = all(f["ok"] == f["requests"] > 0 for f in figures.values())
    why = "" if valid else " (INVALID: not every request ok)"
    rows = []
    for q in ("p50", "p99"):
        base, via = direct["ttft_ms"][q], routed["ttft_ms"][q]
        rows.append(
            Row(f"router: TTFT {q} through sglang-router vs direct{why}", via, "ms", baseline=base,
                ratio=via / base if base else None)
        )  # fmt: skip
        rows.append(Row(f"router: TTFT {q} added by the router{why}", via - base, "ms"))
    rows.append(Row("router: requests ok (direct / routed)", routed["ok"], "requests", baseline=direct["ok"]))
    return rows


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
