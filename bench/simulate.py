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
row of its own; the second's is a case of its own (``simulate-100k``, ``run_fleet_target``:
given the target's 5 minutes, how far it gets), and a fleet of 64 with 2,000 agents for a
minute stands in for it among the rows. The speed-up the rows measure says how far off each
target is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.common import Row

#: (agents, simulated seconds of sending, replicas)
SIZES: tuple[tuple[int, int, int], ...] = (
    (200, 60, 1), (1_000, 60, 1), (1_000, 60, 8), (10_000, 600, 1), (2_000, 60, 64),
)  # fmt: skip
#: issue 30's speed target: simulated seconds per wall second
TARGET_SPEEDUP = 100.0


def _label(agents: int, duration_s: int, fleet: int) -> str:
    fleet_part = f", fleet of {fleet}" if fleet > 1 else ""
    return f"simulate {agents:,} agents, {duration_s} s sending{fleet_part}"


@dataclasses.dataclass
class _Child:
    """One ``swarm simulate`` child's outcome: its JSON result and its one account, the agents
    it started, its wall time, its own peak memory, whether the budget interrupted it."""

    result: dict[str, Any]
    account: dict[str, Any]
    started: int
    wall_s: float
    peak_mib: float
    interrupted: bool


def _simulate(agents: int, duration_s: int, fleet: int, budget_s: float | None = None) -> _Child | str:
    """One ``swarm simulate`` child, or why it failed. With ``budget_s``, it is interrupted
    (SIGINT, as Ctrl-C) once it has run that long, and the result is how far it got."""
    arrival = f"constant:{agents / duration_s:.6g}"  # every agent starts within the window
    command = [
        sys.executable, "-m", "swarm", "simulate", "--engine", "sglang", "--agents", str(agents),
        "--duration", str(duration_s), "--arrival", arrival, "--fleet", str(fleet), "--no-progress", "--json",
    ]  # fmt: skip
    with (
        tempfile.TemporaryDirectory() as out,
        tempfile.TemporaryFile("w+") as stdout,
        tempfile.TemporaryFile("w+") as stderr,
    ):
        t0 = time.perf_counter()
        child = subprocess.Popen([*command, "--output", out], stdout=stdout, stderr=stderr, text=True)
        try:
            status, usage, interrupted = _wait_within(child, budget_s)  # this child's own peak memory
        finally:
            if child.returncode is None:  # the bench itself stopped: so does its child
                child.kill()
                child.wait()
        wall_s = time.perf_counter() - t0
        stdout.seek(0)
        stderr.seek(0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 and not interrupted:
            return f"FAILED: {stderr.read().strip()[-200:]}"
        try:
            result = json.loads(stdout.read())
            (account,) = result["simulation"]
        except (json.JSONDecodeError, KeyError, ValueError):
            return f"FAILED (exit {code}, no account of the run): {stderr.read().strip()[-200:]}"
        started = _sessions_started(result["run_dir"])
    return _Child(result, account, started, wall_s, usage.ru_maxrss / 1024, interrupted)


#: how long an interrupted child may take to stop (its closing summary) before it is killed
STOP_GRACE_S = 300.0


def _wait_within(child: subprocess.Popen[str], budget_s: float | None) -> tuple[int, Any, bool]:
    """``os.wait4`` for ``child``: its status, its resource usage, and whether it was
    interrupted: sent SIGINT once ``budget_s`` had passed (None: no budget), and killed if it
    then takes more than ``STOP_GRACE_S`` to stop."""
    done = _reaped(child, None if budget_s is None else time.monotonic() + budget_s)
    if done is not None:
        return (*done, False)
    child.send_signal(signal.SIGINT)
    done = _reaped(child, time.monotonic() + STOP_GRACE_S)
    if done is None:
        child.kill()
        done = _reaped(child, None)
    assert done is not None
    return (*done, True)


def _reaped(child: subprocess.Popen[str], until: float | None) -> tuple[int, Any] | None:
    """``child``'s status and resource usage once it has ended (its ``returncode`` set), polled
    until ``until`` (``time.monotonic``; None: waited for); None if it still runs then."""
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG if until is not None else 0)
        if pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return status, usage
        if until is None or time.monotonic() >= until:
            return None
        time.sleep(0.25)


def _one(agents: int, duration_s: int, fleet: int) -> list[Row]:
    label = _label(agents, duration_s, fleet)
    done = _simulate(agents, duration_s, fleet)
    if isinstance(done, str):
        return [Row(f"{label} ({done})", None, "")]
    account, started, wall_s, peak_mib = done.account, done.started, done.wall_s, done.peak_mib
    requests = account["requests"]
    rows = [
        Row(f"{label}: simulated s per wall s", account["speedup"], "x", target=f">= {TARGET_SPEEDUP:g}",
            met=account["speedup"] >= TARGET_SPEEDUP),
        Row(f"{label}: agents started", started, "agents", target=f"= {agents:,}", met=started == agents),
        Row(f"{label}: clock events per wall s", account["events"] / account["wall_s"], "events/s"),
        Row(f"{label}: process wall time", wall_s, "s"),
        Row(f"{label}: peak memory", peak_mib, "MiB"),
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


#: issue 30's second target: (agents, simulated seconds of sending, replicas), run within
#: FLEET_BUDGET_S of wall time and FLEET_MEMORY_MIB of memory
FLEET_TARGET: tuple[int, int, int] = (100_000, 600, 64)
FLEET_BUDGET_S = 300.0
FLEET_MEMORY_MIB = 2_048.0
#: a smoke run of the same case (``--quick``)
FLEET_QUICK: tuple[tuple[int, int, int], float] = ((2_000, 60, 64), 15.0)


def run_fleet_target(
    size: tuple[int, int, int] = FLEET_TARGET, budget_s: float = FLEET_BUDGET_S
) -> list[Row]:
    """Issue 30's second target as it is stated: 100,000 agents of the emulated showdown on a
    fleet of 64 sglang twins, started evenly over 10 simulated minutes, given the target's
    5 minutes of wall time (then interrupted, as Ctrl-C does, if not done): how many of the
    simulated seconds it reached (the run's whole simulated time, the last requests' drain
    after the sending window included, when it finished), at what speed, and its peak memory
    by then, which the rest of the run would only raise. Not in the default (5 minutes)."""
    agents, duration_s, fleet = size
    label = _label(agents, duration_s, fleet) + f", {budget_s:g} s"
    done = _simulate(agents, duration_s, fleet, budget_s)
    if isinstance(done, str):
        return [Row(f"{label} ({done})", None, "")]
    account, reached_s = done.account, done.account["simulated_s"]
    finished = done.result["status"] == "complete" and not done.interrupted
    # the whole process's time (its start-up within the budget), as the target reads
    process_s = budget_s if done.interrupted else done.wall_s
    speed, speed_target = reached_s / process_s, duration_s / budget_s
    stopped = f"interrupted at {budget_s:g} s of wall time (its closing summary done at {done.wall_s:.0f} s)"
    return [
        Row(f"{label}: simulated s reached", reached_s, "s", target=f">= {duration_s} in {budget_s:g} s",
            met=finished and reached_s >= duration_s, note=None if finished else stopped),
        Row(f"{label}: simulated s per process s", speed, "x", target=f">= {speed_target:g}",
            met=speed >= speed_target),
        Row(f"{label}: agents started", done.started, "agents"),
        Row(f"{label}: peak memory, its summary's included", done.peak_mib, "MiB",
            target=f"<= {FLEET_MEMORY_MIB:,.0f}", met=done.peak_mib <= FLEET_MEMORY_MIB),
        Row(f"{label}: clock events per wall s", account["events"] / account["wall_s"], "events/s"),
        Row(f"{label}: requests per wall s", account["requests"] / account["wall_s"], "req/s"),
    ]  # fmt: skip
