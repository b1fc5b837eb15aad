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
from typing import Any

from bench.common import Row

FIRST_TOKEN_MS = 20.0
TOKEN_MS = 5.0
AGENTS = 60
ARRIVAL = "poisson:6"
DURATION_S = 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _router(worker: str) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
         "--prometheus-host", "127.0.0.1", "--prometheus-port", str(_free_port()), "--policy", "round_robin",
         "--worker-urls", worker, "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/workers", timeout=2) as resp:
                    listed = json.loads(resp.read())
                if any(isinstance(w, dict) and w.get("is_healthy") for w in listed.get("workers", [])):
                    break
            except (OSError, ValueError, AttributeError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "sglang-router did not list its worker healthy within 60 s"
                    + (f" (it exited with {proc.returncode}; pip install sglang-router?)" if proc.poll() is not None else "")
                )
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
    with EmulatorProcess(emulator_args) as emulator, _router(emulator.url) as routed, tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-m", "swarm", "run", "--json", "--no-progress", "--executor", "inprocess",
             "--target", f"direct={emulator.url}", "--target", f"routed={routed}", "--engine", "sglang",
             "--profile", "support_agent", "--agents", str(AGENTS), "--arrival", ARRIVAL, "--duration", str(DURATION_S),
             "--seed", "1", "-o", tmp],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if out.returncode not in (0, 1, 3):
            raise RuntimeError(f"swarm run failed ({out.returncode}): {out.stderr[-2000:]}")
        (folder,) = [os.path.join(tmp, d) for d in os.listdir(tmp)]
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
