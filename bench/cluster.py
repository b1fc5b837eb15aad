"""Cluster: requests/s, driver ingest and CPU with 1, 2, 4 and 8 worker actors on a real
multi-node Ray (``swarm.cluster.loopback``: a head without CPUs and two worker nodes).

For each worker count, a fresh driver process joins the cluster with ``--address`` and runs
the same ``AGENTS`` agents over them (``bench_agent``: chains of 4 calls, 16-token answers,
no think time, all at once) against ``swarm emulate --timing zero`` in its own
process. Figures, from the trace and the process clocks:

- requests/s: rows over the run's span (first send to last answer);
- driver CPU per 1,000 records: the driver process's CPU time (all threads, Ray's included)
  from its first drained record to the end of sending, per 1,000 records drained in that
  span (Ray's start, the workers' creation and the start lead left out); its share of one
  core over that span, and that share per worker;
- driver ingest per CPU-second: the same figure turned over: records the driver receives and
  writes (all of them pass through it) per second of its CPU;
- worker CPU per 1,000 requests: the workers' CPU time (``WorkerInfo.cpu_s``) per 1,000.

From them, sizing rows: the records/s one driver core can take (``1000 / driver ms per 1,000``),
and the requests/s one worker core can send. On this 2-core machine every process shares the
same two cores, so requests/s stops growing where the machine saturates; the per-record CPU
figures are what carry over to a real cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from bench.common import Row, invalid_because, labelled
from bench.ray_scale import bench_agents

WORKERS = (1, 2, 4, 8)
#: the same swarm for every worker count: 16,000 requests, several seconds on any machine
AGENTS = 4000
CALLS = 4


def one(address: str, workers: int, url: str) -> dict[str, Any]:
    """One configuration, this process the driver; its figures."""
    import pyarrow.compute as pc

    from swarm.cluster.executor import RayExecutor
    from swarm.request import Timeouts
    from swarm.runtime.agent_source import AgentSource
    from swarm.runtime.context import ResolvedTarget, TargetRun
    from swarm.runtime.live_stats import RunStats
    from swarm.trace.reader import read_requests
    from swarm.trace.sink import ParquetTraceSink
    from swarm.trace.storage import RunStorage

    agents = AGENTS
    workload = bench_agents(agents)
    with tempfile.TemporaryDirectory() as tmp, RayExecutor(workers=workers, address=address) as executor:
        storage = RunStorage.at(tmp)
        sink = ParquetTraceSink(storage, writer="bench")
        stats = RunStats()
        # the driver's CPU while records flow: from the first drained record to the end of
        # sending (Ray's start, the actors' creation and the start lead are left out)
        marks: list[tuple[float, float, int]] = []

        def sample() -> None:
            while not stats.requests and not stats.finished:
                time.sleep(0.01)
            marks.append((time.process_time(), time.monotonic(), stats.requests))
            while not stats.finished:
                time.sleep(0.01)
            marks.append((time.process_time(), time.monotonic(), stats.requests))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            outcome = executor.run_target(
                TargetRun(
                    AgentSource(workload), ResolvedTarget("t", url, "sglang", "openai-chat", "m"), sink,
                    stats, run_id="bench", timeouts=Timeouts(first_token_s=300, total_s=600), storage=storage,
                )
            )  # fmt: skip
        finally:
            sink.close()
        sampler.join(timeout=10)
        (cpu0, wall0, rec0), (cpu1, wall1, rec1) = marks[0], marks[-1]
        driver_cpu_s, driver_wall_s, driver_records = cpu1 - cpu0, wall1 - wall0, rec1 - rec0
        table = read_requests(tmp, columns=["status", "sent_ns", "e2e_ns"])
    start = pc.min(table["sent_ns"]).as_py()
    end = pc.max(pc.add(table["sent_ns"], pc.fill_null(table["e2e_ns"], 0))).as_py()
    span_s = (end - start) / 1e9 if table.num_rows else 0.0
    rows = table.num_rows
    return {
        "expected": agents * CALLS,
        "requests": rows,
        "ok": int(pc.sum(pc.equal(table["status"], "ok")).as_py() or 0),
        "workers": len(outcome.workers),
        "workers_alive": sum(1 for w in outcome.workers if w.alive),
        "nodes": len({w.node_id for w in outcome.workers}),
        "span_s": span_s,
        "requests_per_s": rows / span_s if span_s else 0.0,
        "driver_cpu_s": driver_cpu_s,
        "driver_wall_s": driver_wall_s,
        "driver_records": driver_records,
        "workers_measured": sum(1 for w in outcome.workers if float(w.cpu_s) > 0),
        "worker_cpu_s": sum(float(w.cpu_s) for w in outcome.workers),
    }


def _child(address: str, workers: int, url: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.cluster", "--address", address, "--workers", str(workers), "--url", url],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"bench child failed: {out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run(workers: tuple[int, ...] = WORKERS) -> list[Row]:
    from swarm.cluster.loopback import LoopbackCluster
    from swarm.emulator.process import EmulatorProcess

    rows: list[Row] = []
    driver_ms: list[float] = []
    worker_ms: list[float] = []
    with LoopbackCluster(worker_cpus=(4, 4)) as cluster:
        for n in workers:
            with EmulatorProcess(["--engine", "sglang", "--timing", "zero", "--cache-tokens", "0"]) as emu:
                res = _child(cluster.address, n, emu.url)
            why = invalid_because(
                expected=int(res["expected"]), requests=int(res["requests"]), ok=int(res["ok"]),
                workers=int(res["workers"]), workers_alive=int(res["workers_alive"]),
                workers_measured=int(res["workers_measured"]),
            )  # fmt: skip
            tag = labelled(f"cluster, {n} worker{'s' if n > 1 else ''} on {res['nodes']} node(s)", why)
            records = max(int(res["requests"]), 1)
            d_ms = res["driver_cpu_s"] / max(int(res["driver_records"]), 1) * 1e6  # ms per 1,000 records
            w_ms = res["worker_cpu_s"] / records * 1e6
            share = res["driver_cpu_s"] / res["driver_wall_s"] if res["driver_wall_s"] else 0.0
            if why is None:
                driver_ms.append(d_ms)
                worker_ms.append(w_ms)
            rows += [
                Row(f"{tag}: requests/s", res["requests_per_s"], "req/s"),
                Row(
                    f"{tag}: driver ingest per CPU-second",
                    records / max(res["driver_cpu_s"], 1e-9),
                    "rec/cpu-s",
                ),
                Row(f"{tag}: driver CPU per 1,000 records", d_ms, "ms"),
                Row(f"{tag}: driver CPU share (of one core)", share * 100, "%"),
                Row(f"{tag}: driver CPU share per worker", share * 100 / n, "%"),
                Row(f"{tag}: worker CPU per 1,000 requests", w_ms, "ms"),
            ]
    if driver_ms and worker_ms:
        rows += [
            Row("sizing: records/s one driver core takes (median over worker counts)", 1e6 / _median(driver_ms), "rec/s"),
            Row("sizing: requests/s one worker core sends (median over worker counts)", 1e6 / _median(worker_ms), "req/s"),
        ]  # fmt: skip
    return rows


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--url", required=True)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    print(json.dumps(one(args.address, args.workers, args.url)))
