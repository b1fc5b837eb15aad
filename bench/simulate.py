"""How fast ``swarm simulate`` runs the built-in swarm: simulated seconds per wall second,
clock events and requests per wall second, and peak memory, on one core.

Each row is one ``swarm simulate`` process (the emulated showdown: the study's tree of thought
beside Claude Code sessions started mid-life, as ``swarm run`` sends with nothing given)
against the sglang twin, alone or as a fleet behind the cache-aware router. Its agents arrive
evenly over the sending window (``--arrival constant:AGENTS/DURATION``), so every size starts
all its agents: the showdown's own 4 agents a second would start 2,400
of 10,000 in ten minutes. Each row says how many started (the manifest's count). Issue 30's targets:
10,000 agents for 10 simulated minutes at least 100x faster than real time, and 100,000 agents
on 64 replicas for 10 simulated minutes in 5 minutes and 2 GB. The first target's size is a
row of its own; the second's is not (a fleet of 64 with 2,000 agents for a minute stands in:
10,000 started within the minute passed 23 GB),
and the speed-up the rows measure says how far off each target is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from bench.common import Row

#: (agents, simulated seconds of sending, replicas)
SIZES: tuple[tuple[int, int, int], ...] = (
    (200, 60, 1), (1_000, 60, 1), (1_000, 60, 8), (10_000, 600, 1), (2_000, 60, 64),
)  # fmt: skip
#: issue 30's speed target: simulated seconds per wall second
TARGET_SPEEDUP = 100.0


def _one(agents: int, duration_s: int, fleet: int) -> list[Row]:
    label = f"simulate {agents:,} agents, {duration_s} s sending" + (f", fleet of {fleet}" if fleet > 1 else "")
    arrival = f"constant:{agents / duration_s:.6g}"  # every agent starts within the window
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        t0 = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "swarm", "simulate", "--engine", "sglang", "--agents", str(agents),
             "--duration", str(duration_s), "--arrival", arrival, "--fleet", str(fleet), "--no-progress", "--json", "--output", out],
            stdout=stdout, stderr=stderr, text=True,
        )  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak memory
        child.returncode = os.waitstatus_to_exitcode(status)
        wall_s = time.perf_counter() - t0
        stdout.seek(0)
        stderr.seek(0)
        if child.returncode != 0:
            return [Row(f"{label} (FAILED: {stderr.read().strip()[-200:]})", None, "")]
        result = json.loads(stdout.read())
        started = _sessions_started(result["run_dir"])
    (account,) = result["simulation"]
    requests = account["requests"]
    rows = [
        Row(f"{label}: simulated s per wall s", account["speedup"], "x", target=f">= {TARGET_SPEEDUP:g}",
            met=account["speedup"] >= TARGET_SPEEDUP),
        Row(f"{label}: agents started", started, "agents", target=f"= {agents:,}", met=started == agents),
        Row(f"{label}: clock events per wall s", account["events"] / account["wall_s"], "events/s"),
        Row(f"{label}: process wall time", wall_s, "s"),
        Row(f"{label}: peak memory", usage.ru_maxrss / 1024, "MiB"),
    ]  # fmt: skip
    if requests:
        rows.append(Row(f"{label}: requests per wall s", requests / account["wall_s"], "req/s"))
    return rows


def _sessions_started(run_dir: str) -> int:
    """The agents the simulated run started, from its manifest."""
    from swarm.trace.manifest import RunManifest

    manifest = RunManifest.read(run_dir)
    return sum(t.sessions_started for t in manifest.targets)


def run(sizes: tuple[tuple[int, int, int], ...] = SIZES) -> list[Row]:
    rows: list[Row] = []
    for agents, duration_s, fleet in sizes:
        rows += _one(agents, duration_s, fleet)
    return rows
