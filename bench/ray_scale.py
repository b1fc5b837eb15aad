"""Ray scale: 500 / 2,000 / 10,000 concurrent agents over 1 and 2 Ray workers.

For each size and worker count, one fresh process runs the swarm (a chain of 4 calls per
agent, 16 output tokens each, all agents at once) through the Ray executor against
``swarm emulate`` in its own process:

- against the zero-delay emulator: requests/s and streamed chunks/s over the run (first send
  to last answer, from the trace), the driver's and the workers' peak RSS;
- against a fixed-delay emulator (first token 50 ms, then 10 ms a token): the TTFT error,
  measured TTFT minus 50 ms, median and p99.

Both the generator and the emulator run on this machine, so at high counts the figures show
where a 2-core machine saturates, not an engine's limits.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Row, invalid_because, labelled

SIZES = (500, 2000, 10000)
WORKERS = (1, 2)
TTFT_MS, ITL_MS = 50.0, 10.0


def bench_agents(agents: int) -> Any:
    """The Ray cases' swarm: ``agents`` ``bench_agent``s (chains of 4 calls, 16-token answers,
    no think time), all at once."""
    from swarm.workload.arrival import ArrivalSpec
    from swarm.workload.catalog import Catalog
    from swarm.workload.workload import MixEntry, Workload, WorkloadSpec

    spec = WorkloadSpec(
        agents=agents,
        mix=[MixEntry(profile="bench_agent", topology="chain")],
        arrival=ArrivalSpec(process="all_at_once", rate=None),
    )
    return Workload(spec, Catalog(agent_dirs=[Path(__file__).parent / "profiles"]))


def one(agents: int, workers: int, url: str) -> dict[str, Any]:
    """Run one configuration in this process (the driver); print its figures as JSON."""
    import numpy as np
    import pyarrow.compute as pc

    from swarm.cluster.executor import RayExecutor
    from swarm.cluster.worker import peak_rss_bytes
    from swarm.request import Timeouts
    from swarm.runtime.agent_source import AgentSource
    from swarm.runtime.context import ResolvedTarget, TargetRun
    from swarm.runtime.live_stats import RunStats
    from swarm.trace.reader import read_requests
    from swarm.trace.sink import ParquetTraceSink
    from swarm.trace.storage import RunStorage

    workload = bench_agents(agents)
    with tempfile.TemporaryDirectory() as tmp, RayExecutor(workers=workers) as executor:
        storage = RunStorage.at(tmp)
        sink = ParquetTraceSink(storage, writer="bench")
        try:
            outcome = executor.run_target(
                TargetRun(
                    AgentSource(workload), ResolvedTarget("t", url, "sglang", "openai-chat", "m"), sink,
                    RunStats(), run_id="bench", timeouts=Timeouts(first_token_s=300, total_s=600), storage=storage,
                )
            )  # fmt: skip
        finally:
            sink.close()
        table = read_requests(tmp, columns=["status", "sent_ns", "e2e_ns", "ttft_ns", "chunk_ns"])
    alive = [w for w in outcome.workers if w.alive]
    measured = [w for w in outcome.workers if w.peak_rss_bytes > 0]
    ok = table.filter(pc.equal(table["status"], "ok"))
    start = pc.min(table["sent_ns"]).as_py()
    end = pc.max(pc.add(table["sent_ns"], pc.fill_null(table["e2e_ns"], 0))).as_py()
    duration = (end - start) / 1e9
    ttft = ok["ttft_ns"].to_numpy().astype(float) / 1e6
    chunks = int(pc.sum(pc.list_value_length(ok["chunk_ns"])).as_py() or 0)
    return {
        "expected": agents * workload.topologies[0].graph.number_of_nodes(),  # a chain: no pruning
        "workers": len(outcome.workers),
        "workers_alive": len(alive),
        "workers_measured": len(measured),
        "requests": table.num_rows,
        "ok": ok.num_rows,
        "duration_s": duration,
        "requests_per_s": table.num_rows / duration if duration else 0.0,
        "chunks_per_s": chunks / duration if duration else 0.0,
        "driver_rss_mb": peak_rss_bytes() / 2**20,
        "worker_rss_mb": max((w.peak_rss_bytes for w in outcome.workers), default=0) / 2**20,
        # a worker that died (or was not measured) has no growth: the figure is then unknown
        "worker_growth_kb_per_agent": max(
            (w.peak_rss_bytes - w.start_rss_bytes) / max(w.sessions, 1) / 1024
            for w in measured
        )
        if measured and len(measured) == len(outcome.workers)
        else None,
        "driver_kb_per_agent": peak_rss_bytes() / agents / 1024,
        "ttft_err_p50_ms": float(np.percentile(ttft, 50)) - TTFT_MS if ttft.size else float("nan"),
        "ttft_err_p99_ms": float(np.percentile(ttft, 99)) - TTFT_MS if ttft.size else float("nan"),
    }


def _child(agents: int, workers: int, url: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.ray_scale", "--agents", str(agents), "--workers", str(workers), "--url", url],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"bench child failed: {out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


SCALE_AGENTS = 10_000


def scale(agents: int = SCALE_AGENTS) -> list[Row]:
    """10,000 concurrent agents on one Ray worker against the zero-delay emulator: requests/s,
    chunks/s, and memory per agent (the worker's peak RSS minus its RSS when the agents
    started, over its agents; the driver's whole peak RSS over all agents)."""
    from swarm.emulator.process import EmulatorProcess

    with EmulatorProcess(["--engine", "sglang", "--timing", "zero", "--cache-tokens", "0"]) as emu:
        res = _child(agents, 1, emu.url)
    return scale_rows(agents, res)


def scale_rows(agents: int, res: dict[str, Any]) -> list[Row]:
    """The scale case's rows from one child's figures; nothing is met unless every expected
    request is there and ok, and every worker lived and was measured."""
    why = invalid_because(
        expected=int(res["expected"]), requests=int(res["requests"]), ok=int(res["ok"]),
        workers=int(res["workers"]), workers_alive=int(res["workers_alive"]),
        workers_measured=int(res["workers_measured"]),
    )  # fmt: skip
    tag = labelled(f"scale, {agents:,} agents x 1 Ray worker", why)
    per_agent = res["worker_growth_kb_per_agent"]
    return [
        Row(f"{tag}: requests/s", res["requests_per_s"], "req/s"),
        Row(f"{tag}: chunks/s", res["chunks_per_s"], "chunks/s"),
        Row(
            f"{tag}: ok requests",
            res["ok"],
            "requests",
            target=f"= {res['expected']:,.0f} expected",
            met=why is None,
        ),
        Row(
            f"{tag}: worker RSS growth per agent",
            per_agent,
            "KB",
            target="<= 30 KB",
            met=why is None and per_agent is not None and per_agent <= 30,
        ),
        Row(f"{tag}: worker peak RSS", res["worker_rss_mb"], "MB"),
        Row(f"{tag}: driver peak RSS per agent", res["driver_kb_per_agent"], "KB"),
    ]


def run(sizes: tuple[int, ...] = SIZES, workers: tuple[int, ...] = WORKERS) -> list[Row]:
    from swarm.emulator.process import EmulatorProcess

    rows: list[Row] = []
    for n in sizes:
        for w in workers:
            with EmulatorProcess(["--engine", "sglang", "--timing", "zero", "--cache-tokens", "0"]) as emu:
                zero = _child(n, w, emu.url)
            with EmulatorProcess(
                [
                    "--engine",
                    "sglang",
                    "--timing",
                    "fixed",
                    "--first-token-ms",
                    str(TTFT_MS),
                    "--token-ms",
                    str(ITL_MS),
                ]
            ) as emu:
                fixed = _child(n, w, emu.url)
            why = "; ".join(
                f"{label}: {reason}"
                for label, res in (("zero-delay", zero), ("fixed", fixed))
                if (reason := invalid_because(
                    expected=int(res["expected"]), requests=int(res["requests"]), ok=int(res["ok"]),
                    workers=int(res["workers"]), workers_alive=int(res["workers_alive"]),
                    workers_measured=int(res["workers_measured"]),
                ))
            ) or None  # fmt: skip
            tag = labelled(f"ray {n} agents x {w} worker{'s' if w > 1 else ''}", why)
            rows += [
                Row(f"{tag}: requests/s", zero["requests_per_s"], "req/s"),
                Row(f"{tag}: chunks/s", zero["chunks_per_s"], "chunks/s"),
                Row(f"{tag}: driver peak RSS", zero["driver_rss_mb"], "MB"),
                Row(f"{tag}: worker peak RSS", zero["worker_rss_mb"], "MB"),
                Row(f"{tag}: TTFT error p50 (fixed 50 ms)", fixed["ttft_err_p50_ms"], "ms"),
                Row(f"{tag}: TTFT error p99 (fixed 50 ms)", fixed["ttft_err_p99_ms"], "ms"),
            ]
            time.sleep(0.5)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--url", required=True)
    args = parser.parse_args()
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    print(json.dumps(one(args.agents, args.workers, args.url)))
