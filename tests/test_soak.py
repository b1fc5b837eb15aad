"""Soak: 500 agents for 2 minutes against an emulator injecting 5 % mixed faults.

What must hold, on any machine however busy: no run-level crash; one row per request; every
row that is not ok explained by the emulator's own fault log joined on request id (the client
sends its request id as ``X-Request-Id``), by a refused connection, or counted as a timeout
the emulator did not inject (a slow machine's); no record outlives the run. Its memory is
printed; memory per agent as a target is a bench case.

The emulator runs as its own process (the other core) with fixed timing; agents are chains of
64 calls 1.5 s of thinking apart (they keep sending for the whole two minutes) that carry on
with their stand-in output when a call fails, so the swarm keeps its size whatever the faults
do.
"""

from __future__ import annotations

import gc
import json
import resource
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from http.client import RemoteDisconnected
from pathlib import Path

import pytest

from swarm.emulator.process import EmulatorProcess
from swarm.launch import execute_run
from swarm.record import RequestRecord
from swarm.runtime.specs import RunSpec, TargetSpec, TimeoutSpec
from swarm.trace.manifest import RunStatus
from swarm.trace.reader import read_requests, unfinished_parts
from swarm.workload.arrival import ArrivalSpec
from swarm.workload.workload import MixEntry, WorkloadSpec

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

#: the (status, http_status) each injected fault calls for
EXPECTED: dict[str, tuple[str, int | None]] = {
    "http_500": ("http_error", 500), "http_503": ("http_error", 503), "http_429": ("http_error", 429),
    "slow_headers": ("timeout", None), "stall_first": ("timeout", 200), "stall_mid": ("timeout", 200),
    "cut": ("stream_error", 200), "malformed": ("stream_error", 200), "no_done": ("stream_error", 200),
    "oversized": ("stream_error", 200),
}  # fmt: skip

#: stalls 2.5 s past the client's 1.5 s idle deadline: on a machine busy with a CPU hog and the
#: engine tests beside this one, a 1 s margin let a stalled stream finish before its timer ran
FAULTS = "mixed=0.05,refuse=0.05,stall_s=4,slow_headers_s=4,oversized_bytes=4300000,seed=11"


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
                on_failure="standin",
            ),
            duration_s=DURATION_S,
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
        # the emulator resets 5 % of new connections, this one's too: ask again (each refused ask
        # is one more refusal in its counts, taken off below)
        refused_asks = 0
        while True:
            try:
                with urllib.request.urlopen(emulator.url + "/swarm/faults?by_request=1", timeout=10) as resp:
                    seen = json.load(resp)
                break
            except (ConnectionResetError, RemoteDisconnected, urllib.error.URLError) as exc:
                # a reset while the request is written comes as a URLError around it
                if isinstance(exc, urllib.error.URLError) and not isinstance(exc.reason, ConnectionResetError):
                    raise
                refused_asks += 1
                assert refused_asks < 20, f"the fault log could not be read: {exc}"
    finally:
        stop.set()
        emulator.stop()

    # no run-level crash; nothing left unwritten; nothing of the run left alive
    manifest = result.manifest
    assert manifest.status is RunStatus.COMPLETE, manifest.status_reason
    assert manifest.records_lost == 0 and not unfinished_parts(result.run_dir)
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, RequestRecord)], "records outlived the run"
    table = read_requests(
        result.run_dir, columns=["run_id", "request_id", "status", "http_status", "error", "sent_ns", "chunk_ns"]
    )
    rows = table.num_rows
    statuses = Counter(table["status"].to_pylist())
    injected: dict[str, int] = seen["injected"]
    injected["refuse"] -= refused_asks
    by_request: dict[str, str] = seen["by_request"]
    assert seen["by_request_complete"]
    assert sum(manifest.counts.values()) == rows
    assert len(set(table["request_id"].to_pylist())) == rows  # one row per request
    assert all(injected[k] > 0 for k in injected), injected  # every kind happened
    assert statuses["cancelled"] == 0

    # every row that is not ok is explained: joined on request id with the emulator's fault
    # log, its status is the fault's (or a timeout, when the client's deadline came before the
    # fault on a slow machine); a refused connection is a connect_error the log cannot name;
    # what is left are timeouts the emulator did not inject (the machine was slow), counted
    # a stall the client judges by its reads' receive stamps; one it was away for entirely (the
    # whole answer in one read, on a machine too busy to run it) is ok, and counted
    explained = {
        "the fault's": 0, "timeout before the fault": 0, "refused": 0, "timeout, not injected": 0,
        "stall unseen: the whole answer in one read": 0,
    }  # fmt: skip
    columns = [table[c].to_pylist() for c in ("request_id", "status", "http_status", "error", "chunk_ns")]
    for rid, status, http, error, chunks in zip(*columns, strict=True):
        fault = by_request.pop(f"{manifest.run_id}/{rid}", None)  # the client's X-Request-Id
        if fault is not None:
            want_status, want_http = EXPECTED[fault]
            if status == "timeout" and want_status != "timeout":
                explained["timeout before the fault"] += 1
            elif status == "ok" and fault in ("stall_first", "stall_mid") and len(set(chunks)) == 1:
                explained["stall unseen: the whole answer in one read"] += 1
            else:  # a timeout may come before or after the headers of a stall
                assert status == want_status, (rid, fault, status, http, error)
                assert http == want_http or status == "timeout", (rid, fault, status, http, error)
                explained["the fault's"] += 1
        elif status == "connect_error":
            explained["refused"] += 1
        elif status == "timeout":
            explained["timeout, not injected"] += 1
        else:
            assert status == "ok", (rid, status, http, error)
    assert not by_request, f"faulted requests with no row: {list(by_request)[:5]}"
    # each refused connection carried one request (the run's start-up probe may have had a
    # reset connection or two as well: it tries its GETs again, and they have no rows); on a
    # machine so busy that the emulator accepts a connection after its request's first-token
    # deadline, that request is a timeout the log cannot name, and its reset comes after
    connect_errors = Counter(
        (e or "")[:80] for e, s in zip(table["error"].to_pylist(), table["status"].to_pylist(), strict=True)
        if s == "connect_error"
    )  # fmt: skip
    assert explained["refused"] <= injected["refuse"], connect_errors.most_common(5)
    assert injected["refuse"] <= explained["refused"] + 8 + explained["timeout, not injected"], explained
    # the emulator saw every request but the refused ones, and perhaps a few that timed out
    # before it read them
    unseen = rows - explained["refused"] - seen["requests"]
    assert 0 <= unseen <= explained["timeout, not injected"] + explained["timeout before the fault"]
    errors = Counter(
        e.split(":")[0] for e, s in zip(table["error"].to_pylist(), table["status"].to_pylist(), strict=True)
        if s == "stream_error"
    )  # fmt: skip
    assert set(errors) <= {"connection broken", "invalid JSON in stream event", "stream ended without [DONE]",
                           "event-stream line longer than 4194304 bytes"}  # fmt: skip

    # memory: printed, not asserted (a magnitude: `python -m bench scale` holds memory per agent
    # to its target); what must hold on any machine is that nothing of the run outlives it
    mid = [rss for t, rss in samples if 55 <= t <= 65]
    end = [rss for t, rss in samples if t >= DURATION_S - 10]
    sent = sorted(table["sent_ns"].to_pylist())
    later = sum(1 for t in sent if t - sent[0] >= 60e9)
    growth = (max(end) - max(mid)) / max(later, 1) if mid and end else float("nan")
    print(  # shown with pytest -s: the figures quoted in docs/reliability.md
        f"soak: {rows} rows, {seen['requests']} requests seen, faults {injected}, statuses {dict(statuses)}, "
        f"non-ok rows explained {explained}, {unseen} never reached the emulator; RSS at 60 s "
        f"{max(mid, default=0) / 1e6:.0f} MB, at the end {max(end, default=0) / 1e6:.0f} MB, {growth:.0f} B per "
        "request over the second minute"
    )
