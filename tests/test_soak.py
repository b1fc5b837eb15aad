"""Soak: 500 agents for 2 minutes against an emulator injecting 5 % mixed faults.

What must hold: no run-level crash; every request the emulator saw (and every connection it
refused) is in the trace exactly once, with the status its fault calls for; memory does not
grow beyond what the run's own bookkeeping explains.

The emulator runs as its own process (the other core) with fixed timing; agents are chains of
64 calls 1.5 s of thinking apart (they keep sending for the whole two minutes) that carry on
with their stand-in output when a call fails, so the swarm keeps its size whatever the faults
do.
"""

from __future__ import annotations

import json
import resource
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from swarm.arrival import ArrivalSpec
from swarm.emulator.process import EmulatorProcess
from swarm.run import RunSpec, TargetSpec, TimeoutSpec, execute_run
from swarm.trace.manifest import RunStatus
from swarm.trace.reader import read_requests, unfinished_parts
from swarm.workload import MixEntry, WorkloadSpec

AGENTS = 500
DURATION_S = 120.0

PROFILE = """\
name: soak_agent
system_prompt: {style: prose, tokens: 150}
task_tokens: {dist: constant, value: 20}
instruction_tokens: {dist: constant, value: 6}
output_tokens: {default: {dist: constant, value: 12}}
think_time_s: {dist: exponential, mean: 1.5, max: 6.0}
"""
TOPOLOGY = """\
name: long_chain
generator: chain
params: {length: 64}
"""

FAULTS = "mixed=0.05,refuse=0.05,stall_s=2.5,slow_headers_s=2.5,oversized_bytes=4300000,seed=11"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


@pytest.mark.slow
def test_soak_500_agents_2_minutes_5_percent_faults(tmp_path: Path) -> None:
    (tmp_path / "soak_agent.yaml").write_text(PROFILE)
    (tmp_path / "long_chain.yaml").write_text(TOPOLOGY)
    emulator = EmulatorProcess(
        [
            "--engine",
            "sglang",
            "--timing",
            "fixed",
            "--first-token-ms",
            "30",
            "--token-ms",
            "15",
            "--faults",
            FAULTS,
        ]
    )
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample_rss() -> None:
        t0 = time.monotonic()
        while not stop.wait(2.0):
            samples.append((time.monotonic() - t0, _rss_bytes()))

    sampler = threading.Thread(target=sample_rss, daemon=True)
    try:
        spec = RunSpec(
            workload=WorkloadSpec(
                agents=AGENTS,
                mix=[
                    MixEntry(
                        profile=str(tmp_path / "soak_agent.yaml"), topology=str(tmp_path / "long_chain.yaml")
                    )
                ],
                arrival=ArrivalSpec(process="constant", rate=100),  # all 500 within 5 s
                duration_s=DURATION_S,
                on_failure="standin",
            ),
            targets=[TargetSpec(name="emu", url=emulator.url, engine="sglang")],
            output_dir=str(tmp_path / "runs"),
            executor="inprocess",
            timeouts=TimeoutSpec(first_token_s=1.5, idle_s=1.5, total_s=30),
            flush_interval_s=5.0,
            metrics_interval_s=0,  # the scraper's own connections would be refused too, uncounted
        )
        sampler.start()
        result = execute_run(spec)
        stop.set()
        with urllib.request.urlopen(emulator.url + "/swarm/faults", timeout=10) as resp:
            seen = json.load(resp)
    finally:
        stop.set()
        emulator.stop()

    # no run-level crash; nothing left unwritten
    manifest = result.manifest
    assert manifest.status is RunStatus.COMPLETE, manifest.status_reason
    assert manifest.records_lost == 0 and not unfinished_parts(result.run_dir)
    table = read_requests(result.run_dir, columns=["request_id", "status", "http_status", "error", "sent_ns"])
    rows = table.num_rows
    assert rows > 20_000  # 500 agents sending every ~1.9 s for two minutes

    # exactly once: one row per request the emulator saw, plus one per request whose new
    # connection it reset before reading it (the run's start-up probe may have had a reset
    # connection or two as well: it tries its GETs again, and they have no rows)
    injected: dict[str, int] = seen["injected"]
    statuses = Counter(table["status"].to_pylist())
    assert len(set(table["request_id"].to_pylist())) == rows
    assert rows == seen["requests"] + statuses["connect_error"]
    assert statuses["connect_error"] <= injected["refuse"] <= statuses["connect_error"] + 8
    assert sum(manifest.counts.values()) == rows

    # the right status for every fault kind
    http = Counter(
        h for h, s in zip(table["http_status"].to_pylist(), table["status"].to_pylist(), strict=True)
        if s == "http_error"
    )  # fmt: skip
    per_request_faults = sum(v for k, v in injected.items() if k != "refuse")
    assert statuses["ok"] == seen["requests"] - per_request_faults
    assert http == Counter({500: injected["http_500"], 503: injected["http_503"], 429: injected["http_429"]})
    assert statuses["timeout"] == injected["slow_headers"] + injected["stall_first"] + injected["stall_mid"]
    assert statuses["stream_error"] == (
        injected["cut"] + injected["malformed"] + injected["no_done"] + injected["oversized"]
    )
    assert statuses["cancelled"] == 0
    assert all(injected[k] > 0 for k in injected), injected  # every kind happened
    errors = Counter(
        e.split(":")[0] for e, s in zip(table["error"].to_pylist(), table["status"].to_pylist(), strict=True)
        if s == "stream_error"
    )  # fmt: skip
    assert set(errors) <= {"connection broken", "invalid JSON in stream event", "stream ended without [DONE]",
                           "event-stream line longer than 4194304 bytes"}  # fmt: skip

    # memory flat: over the second half, growth stays within the bookkeeping that grows by
    # design (the ideal-cache prefix index keeps every distinct prompt; ~0.5 KB a request)
    mid = [rss for t, rss in samples if 55 <= t <= 65]
    end = [rss for t, rss in samples if t >= DURATION_S - 10]
    assert mid and end
    sent = sorted(table["sent_ns"].to_pylist())
    t_first = sent[0]
    later = sum(1 for s in sent if s - t_first >= 60e9)
    growth_per_request = (max(end) - max(mid)) / max(later, 1)
    print(  # shown with pytest -s: the figures quoted in docs/reliability.md
        f"soak: {rows} rows, {seen['requests']} requests seen, faults {injected}, statuses {dict(statuses)}; "
        f"RSS at 60 s {max(mid) / 1e6:.0f} MB, at the end {max(end) / 1e6:.0f} MB, "
        f"{growth_per_request:.0f} B per request over the second minute"
    )
    assert growth_per_request < 2048, (max(mid), max(end), later)
