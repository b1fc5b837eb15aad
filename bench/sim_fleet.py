"""A three-replica fleet in real time and in virtual time: do they agree per point?

The same sweep twice: once in real time against ``swarm emulate --replicas 3`` (three sglang
twins, one process each) behind SGLang's router (``sglang-router``, ``cache_aware``), once
simulated (``swarm sweep --simulate --fleet 3 --routing cache_aware``) against the same twin.
The twin's steps are slowed (60 ms a step) so that this machine's own delays stay small beside
them. The rows are ``swarm compare``'s per-point errors of the simulated sweep against the real
one (TTFT p50 and p99, output tokens/s, E2E p50, hit ratio), issue 30's bound being 5 %. Not in
the default: needs the router installed (``pip install sglang-router``); about 4 minutes.

What may part them is named in docs/simulation.md: the router's tree holds characters, the
simulated one tokens; the real router's HTTP hop; the machine's own lag in real time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Row
from bench.router import free_port, sglang_router

#: the twin's steps: slow enough that a late wake-up of a few ms is small beside one
SLOW_STEPS = ("--step-base-ms=60", "--prefill-ms-per-token=0.05", "--decode-ms-per-seq=1")
REPLICAS = 3
LADDER = "agents=6,12,24"
#: the built-in tree of thought, its agents started 2 a second, each point 60 s
WORKLOAD = ("--profile", "tree_of_thought", "--topology", "tree_of_thought", "--arrival", "constant:2",
            "--duration", "60", "--seed", "11")  # fmt: skip
ERROR_BOUND = 0.05


def _emulated_fleet(log: Path) -> tuple[subprocess.Popen[bytes], list[str]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm", "emulate", "--engine", "sglang", "--port", str(port),
         "--replicas", str(REPLICAS), *SLOW_STEPS],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    return proc, [f"http://127.0.0.1:{port + i}" for i in range(REPLICAS)]


def _wait_healthy(urls: list[str], timeout_s: float = 60) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    for url in urls:
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} did not come up in {timeout_s:.0f} s") from None
                time.sleep(0.3)


def _sweep(out: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "swarm", "sweep", "--ladder", LADDER, *WORKLOAD, "--executor", "inprocess",
         "--no-progress", "--output", str(out), *args],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"swarm sweep {' '.join(args)} failed: {done.stderr[-1500:]}")


def run() -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        proc, workers = _emulated_fleet(root / "emulate.log")
        try:
            _wait_healthy(workers)
            with sglang_router(workers, "cache_aware", root / "router.log") as router:
                t0 = time.perf_counter()
                _sweep(root / "real", "--target", f"fleet={router}", "--engine", "sglang")
                real_s = time.perf_counter() - t0
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        t0 = time.perf_counter()
        _sweep(root / "sim", "--simulate", "--engine", "sglang", "--fleet", str(REPLICAS), "--routing", "cache_aware",
               *(f"--emulator-arg={a}" for a in SLOW_STEPS))  # fmt: skip
        sim_s = time.perf_counter() - t0
        compared = subprocess.run(
            [sys.executable, "-m", "swarm", "compare", str(root / "real"), str(root / "sim"), "--json"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if compared.returncode != 0:
            raise RuntimeError(f"swarm compare failed: {compared.stderr[-1500:]}")
        result = json.loads(compared.stdout)
    rows = [Row("3-replica fleet sweep: real time", real_s, "s"), Row("... simulated", sim_s, "s")]
    errors = result.get("errors") or {}
    for series in (errors.get("series") or {}).values():
        for point in series["by_load"]:
            for figure, err in point.items():
                if figure == "load" or not isinstance(err, int | float):
                    continue
                if figure == "hit_ratio.diff":  # in points of hit ratio, not relative
                    rows.append(Row(f"agents {point['load']:g}: hit ratio simulated - real", 100 * err, "pts"))
                    continue
                rows.append(
                    Row(f"agents {point['load']:g}: {figure} simulated vs real", 100 * err, "%",
                        target=f"within {ERROR_BOUND:.0%}", met=abs(err) <= ERROR_BOUND)
                )  # fmt: skip
        rows.append(Row("cliff: ladder steps apart", series["cliff_steps"], "steps"))
    return rows
