"""Client-side delay: how late swarm sees a chunk that the engine has already sent.

The emulator (fixed timing: first token at 50 ms, then one every 10 ms) runs with
``--stamp-chunks``: every streamed content event carries ``swarm_sent_ns``, the emulator's
``perf_counter_ns`` (CLOCK_MONOTONIC, shared by the processes of one host) when it wrote the
event. The client keeps, per content event, its receive time minus that stamp. The first event
of a request gives the TTFT delay, the others the ITL delay; p50 / p99 / max over all requests.
Two delays per event: *read*, when the client's event loop read it (what the bench measured
before kernel stamps, and what the targets apply to: the client's own stalls), and *recorded*,
what the trace holds (the kernel's receive stamp of the read, ``clock`` ``kernel``: the error
left in TTFT and ITL once the stamps took the loop's lateness out).

The emulator and the generator are pinned to separate cores (half the machine's each) where
there are two or more, so the figure is the client's delay, not two processes taking turns.
Each size runs in a fresh interpreter: N agents, each a chain of 4 calls, started evenly over
one agent's lifetime so that about N are in flight, in one process (what one Ray worker runs),
against one emulator process. Two agent kinds: ``steady_agent`` (64-token steps and 0.2 s of
think time, paced like the built-in reasoners: ~1 request/s per agent; the targets apply to
it) and ``bench_agent`` (16-token steps, no think time: ~5 requests/s per agent, a stress
case that saturates the client's core at 500 agents).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import subprocess
import sys
import time
from array import array
from collections.abc import Iterable
from pathlib import Path

from bench.common import Row, invalid_because, labelled, send_in_process

SIZES = (500, 2000, 10000)
#: profile -> one agent's lifetime in s (4 calls; starts are spread over it)
PROFILES = {"steady_agent": 3.6, "bench_agent": 0.8}
#: issue 27's targets for steady agents in one process: TTFT and ITL delay p99 (as read, the
#: client's own stalls) at most this, in ms
TARGETS_MS = {500: 2.0, 2000: 1.0, 10000: 3.0}
#: issue 27: memory per agent at 10,000 agents in one process, at most this (KB)
MEMORY_TARGET_KB = {10000: 30.0}


class DelayHistogram:
    """Delays in nanoseconds counted in buckets of 0.1 % relative width from 1 us to 1,000 s
    (under 1 us: one bucket), and the largest exactly. A quantile is its bucket's upper edge
    (the largest delay for the last bucket): at most 0.1 % over the nearest-rank figure, never
    under it. Delays wait in a small array and are counted a batch at a time (numpy), so the
    client's loop, which records them, spends an array append a delay."""

    RATIO = 1.001
    FLOOR_NS = 1_000
    BUCKETS = math.ceil(math.log(1e12 / FLOOR_NS) / math.log(RATIO)) + 2
    BATCH = 8_192

    def __init__(self) -> None:
        import numpy as np

        self.counts = np.zeros(self.BUCKETS, dtype=np.int64)
        self.n = 0
        self.largest_ns: int | None = None
        self._pending = array("q")

    def add(self, delay_ns: int) -> None:
        self._pending.append(delay_ns)
        if len(self._pending) >= self.BATCH:
            self._count()

    def extend(self, delays_ns: Iterable[int]) -> None:
        self._pending.extend(delays_ns)
        if len(self._pending) >= self.BATCH:
            self._count()

    def _count(self) -> None:
        import numpy as np

        pending = np.frombuffer(self._pending, dtype=np.int64)
        if pending.size:
            scaled = np.maximum(pending, self.FLOOR_NS).astype(float) / self.FLOOR_NS
            index = np.where(pending < self.FLOOR_NS, 0, 1 + np.floor(np.log(scaled) / math.log(self.RATIO)))
            self.counts += np.bincount(np.minimum(index, self.BUCKETS - 1).astype(np.int64), minlength=self.BUCKETS)
            self.n += int(pending.size)
            top = int(pending.max())
            self.largest_ns = top if self.largest_ns is None else max(self.largest_ns, top)
        self._pending = array("q")

    def quantile_ms(self, q: float) -> float:
        """The ``q`` quantile (nearest rank: the bucket holding the ceil(q n)-th smallest
        delay), in ms."""
        self._count()
        if not self.n:
            return float("nan")
        import numpy as np

        rank = max(math.ceil(q * self.n - 1e-9), 1)
        i = int(np.searchsorted(np.cumsum(self.counts), rank))
        assert self.largest_ns is not None
        edge_ns = self.largest_ns if i == self.BUCKETS - 1 else self.FLOOR_NS * self.RATIO**i
        return min(edge_ns, self.largest_ns) / 1e6

    def max_ms(self) -> float:
        self._count()
        return float("nan") if self.largest_ns is None else self.largest_ns / 1e6


def one(agents: int, url: str, profile: str, receive_clock: str = "watched") -> dict[str, float]:
    import resource

    from swarm.record import RequestRecord
    from swarm.request import Timeouts
    from swarm.runtime.agent_source import AgentSource
    from swarm.runtime.context import ResolvedTarget
    from swarm.workload.arrival import ArrivalSpec
    from swarm.workload.catalog import Catalog
    from swarm.workload.workload import MixEntry, Workload, WorkloadSpec

    # the code the run loads is loaded before the memory's baseline (about 10 MB of modules,
    # a kilobyte an agent at 10,000 agents, is not what the agents hold)
    for module in ("swarm.runtime.loop", "swarm.clients.h1", "swarm.clients.exchange", "swarm.clients.rx_stamps"):
        importlib.import_module(module)

    catalog = Catalog(agent_dirs=[Path(__file__).parent / "profiles"])
    spec = WorkloadSpec(
        agents=agents,
        mix=[MixEntry(profile=profile, topology="chain")],
        # starts spread evenly over one agent's lifetime: about N agents in flight, not N
        # sends on the same instant (a herd that measures a burst, not a steady swarm)
        arrival=ArrivalSpec(process="constant", rate=agents / PROFILES[profile]),
    )
    # what the bench keeps of each record is a histogram per figure: keeping the records
    # would grow the heap that full collections walk (186 ms passes at 2,000 agents), and
    # keeping every delay (2.5 million ITLs at 10,000 agents) was 4 KB an agent of memory the
    # bench, not the client, held
    kept = {name: DelayHistogram() for name in ("ttft", "itl", "rec_ttft", "rec_itl")}
    counts = {"requests": 0, "ok": 0}

    def keep(record: RequestRecord) -> None:
        counts["requests"] += 1
        if record.ok:
            counts["ok"] += 1
            recorded = record.extra.get("stamp_delays_ns") or []
            lags = record.chunk_lag_ns or (0,) * len(recorded)
            if recorded:
                kept["ttft"].add(recorded[0] + lags[0])
                kept["itl"].extend(d + lag for d, lag in zip(recorded[1:], lags[1:], strict=False))
                kept["rec_ttft"].add(recorded[0])
                kept["rec_itl"].extend(recorded[1:])

    target = ResolvedTarget("t", url, "sglang", "openai-chat", "m")
    peak_before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    workload = Workload(spec, catalog)
    before = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    send_in_process(
        AgentSource(workload),
        target,
        keep,
        timeouts=Timeouts(first_token_s=300, total_s=600),
        measure_send_stamps=True,
        keep_text=False,  # as `swarm run` without --record-text
        receive_clock=receive_clock,
    )
    wall_s = time.perf_counter() - wall0
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out: dict[str, float] = {
        "requests": counts["requests"],
        "ok": counts["ok"],
        "expected": agents * workload.topologies[0].graph.number_of_nodes(),  # a chain: every call sent
        "cpu_ms_per_request": 1000 * cpu_s / max(counts["requests"], 1),
        # the share of the run the client's process was on a core (its own threads together)
        "busy": cpu_s / wall_s if wall_s > 0 else float("nan"),
        "requests_per_s": counts["requests"] / wall_s if wall_s > 0 else float("nan"),
        # the process's peak resident memory over what it held before the workload (its code
        # loaded): the agents in flight, their requests, the trace's buffers
        "kb_per_agent": (after.ru_maxrss - peak_before_kb) / agents,
    }
    for name, held in kept.items():
        out[f"{name}_p50"] = held.quantile_ms(0.50)
        out[f"{name}_p99"] = held.quantile_ms(0.99)
        out[f"{name}_max"] = held.max_ms()
    return out


def short_of(name: str, value_ms: float, target_ms: float, res: dict[str, float]) -> str:
    """By how much a delay target is missed, and why as far as the figures tell: where the
    median event waited longer than the target too, the loop was behind on most reads (a queue
    on the client's core: its CPU per request and the rate say how full); where the median is
    within it, the tail is the loop's stalls."""
    said = f"{value_ms / target_ms:.1f}x the target"
    median = res.get(f"{name.lower()}_p50", float("nan"))
    busy, rate = res.get("busy", float("nan")), res.get("requests_per_s", float("nan"))
    cpu_ms = res.get("cpu_ms_per_request", float("nan"))
    core = f"the client's core {busy:.0%} busy over the run, {cpu_ms:.2f} ms of CPU a request at {rate:,.0f} requests/s"
    if median > target_ms:
        return f"{said}; the median event waited {median:.2f} ms too: the loop was behind on most reads, a queue ({core})"
    return f"{said}; the median event waited {median:.2f} ms: the tail is the loop's stalls ({core})"


def cores() -> tuple[set[int], set[int]] | None:
    """(the generator's cores, the emulator's) when this machine has two or more to share out:
    the figure then measures the client, not two processes taking turns on one core."""
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(available) < 2:
        return None
    half = len(available) // 2
    return set(available[:half]), set(available[half:])


def run(sizes: tuple[int, ...] = SIZES, profile: str = "steady_agent", receive_clock: str = "watched") -> list[Row]:
    from swarm.emulator.process import EmulatorProcess

    rows: list[Row] = []
    split = cores()
    for n in sizes:
        args = ["--engine", "sglang", "--timing", "fixed", "--first-token-ms", "50", "--token-ms", "10",
                "--stamp-chunks", "--cache-tokens", "0"]  # fmt: skip
        with EmulatorProcess(args) as emu:
            if split is not None:
                os.sched_setaffinity(emu.proc.pid, split[1])
            out = subprocess.run(
                [sys.executable, "-m", "bench.client_delay", "--agents", str(n), "--url", emu.url,
                 "--profile", profile, "--receive-clock", receive_clock],
                capture_output=True, text=True, timeout=900,
                preexec_fn=(lambda: os.sched_setaffinity(0, split[0])) if split is not None else None,
            )  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"client-delay child failed: {out.stderr[-2000:]}")
        rows += delay_rows(
            n, profile, json.loads(out.stdout.strip().splitlines()[-1]), pinned=split is not None,
            receive_clock=receive_clock,
        )  # fmt: skip
    return rows


def delay_rows(
    n: int, profile: str, res: dict[str, float], pinned: bool = True, receive_clock: str = "watched"
) -> list[Row]:
    """One size's rows; its TTFT p99 is met only with every expected request there and ok."""
    why = invalid_because(expected=int(res["expected"]), requests=int(res["requests"]), ok=int(res["ok"]))
    where = "" if pinned else ", cores shared with the emulator"
    where += "" if receive_clock == "watched" else f", --receive-clock {receive_clock}"
    tag = labelled(f"client delay, {n} {profile}s{where}", why)
    target = TARGETS_MS.get(n) if profile == "steady_agent" else None
    memory = MEMORY_TARGET_KB.get(n) if profile == "steady_agent" else None

    def p99(name: str) -> Row:
        value = res[f"{name.lower()}_p99"]
        met = (why is None and value <= target) if target else None
        return Row(
            f"{tag}: {name} p99", value, "ms", target=f"<= {target:g} ms" if target else None,
            met=met, note=short_of(name, value, target, res) if met is False and target else None,
        )  # fmt: skip

    return [
        Row(f"{tag}: client CPU per request", res.get("cpu_ms_per_request", float("nan")), "ms"),
        Row(f"{tag}: client core busy", 100 * res.get("busy", float("nan")), "%"),
        Row(
            f"{tag}: memory per agent", res.get("kb_per_agent", float("nan")), "KB",
            target=f"<= {memory:g} KB" if memory else None,
            met=(why is None and res.get("kb_per_agent", math.inf) <= memory) if memory else None,
        ),
        Row(f"{tag}: TTFT p50", res["ttft_p50"], "ms"),
        p99("TTFT"),
        Row(f"{tag}: TTFT max", res["ttft_max"], "ms"),
        Row(f"{tag}: ITL p50", res["itl_p50"], "ms"),
        p99("ITL"),
        Row(f"{tag}: ITL max", res["itl_max"], "ms"),
        *(
            Row(f"{tag}: recorded {name} {q}", res.get(f"rec_{name.lower()}_{q}", float("nan")), "ms")
            for name in ("TTFT", "ITL")
            for q in ("p50", "p99", "max")
        ),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--profile", default="steady_agent", choices=sorted(PROFILES))
    parser.add_argument("--receive-clock", default="watched", choices=("kernel", "watched", "user"))
    args = parser.parse_args()
    print(json.dumps(one(args.agents, args.url, args.profile, args.receive_clock)))
