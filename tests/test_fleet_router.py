"""A fleet behind SGLang's real router (``sglang-router``): three emulator replicas (sglang
profile, 20,000 tokens of KV each), the same seeded swarm through ``round_robin`` and through
``cache_aware``, and a replica killed mid-run.

Support agents (``agents/support_agent.yaml``) extend their own context call after call, so a
call reuses most of its prompt only on the replica its session's last call went to: round robin
sends it elsewhere, and the report must put that loss on the routing. Skipped where the router
is not installed, except in CI (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sglang_router_helper import available, wait_for_counter

from bench.router import sglang_router as router
from swarm.emulator.process import EmulatorProcess

pytestmark = pytest.mark.slow

REPLICA_ARGS = ["--engine", "sglang", "--kv-capacity-tokens", "20000"]
SWARM_ARGS = ["--engine", "sglang", "--executor", "inprocess", "--profile", "support_agent", "--seed", "3"]


def swarm(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swarm", *args], capture_output=True, text=True, timeout=timeout)


def run_folder(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return folder


def report(folder: Path) -> dict[str, Any]:
    done = swarm("report", str(folder), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    (target,) = json.loads(done.stdout)["targets"].values()
    return dict(target)


def flush(urls: list[str]) -> None:
    for url in urls:
        urllib.request.urlopen(urllib.request.Request(url + "/flush_cache", method="POST"), timeout=10).close()


@pytest.fixture
def replicas() -> Iterator[list[EmulatorProcess]]:
    available()
    procs: list[EmulatorProcess] = []
    try:
        for _ in range(3):
            procs.append(EmulatorProcess(REPLICA_ARGS))
        yield procs
    finally:
        for p in procs:
            p.stop()


def test_cache_aware_routing_keeps_sessions_on_their_prefix_and_the_report_blames_round_robin(
    replicas: list[EmulatorProcess], tmp_path: Path
) -> None:
    urls = [p.url for p in replicas]
    figures, folders = {}, {}
    for policy in ("round_robin", "cache_aware"):
        flush(urls)
        with router(urls, policy, tmp_path / f"{policy}.log") as url:
            out = tmp_path / policy
            done = swarm("run", "--target", f"fleet={url}", *SWARM_ARGS, "--agents", "12", "--duration", "20", "-o", str(out))
            assert done.returncode == 0, done.stderr[-3000:]
        folders[policy] = run_folder(out)
        figures[policy] = report(folders[policy])["fleet"]
    rr, ca = figures["round_robin"], figures["cache_aware"]
    for name, fleet in figures.items():
        print(f"{name}: hit {fleet['hit']:.3f}, imbalance {fleet['imbalance']:.2f}, miss shares {fleet['miss_shares']}")
    for fleet in (rr, ca):  # every request named its replica; all three served
        assert fleet["attributed_by"] == "header" and fleet["unattributed"] == 0
        assert sorted(r["replica"] for r in fleet["replicas"]) == sorted(urls)
        assert all(r["requests"] > 0 and r["failed"] == 0 for r in fleet["replicas"])
        assert fleet["losses"] == []
    assert ca["hit"] > rr["hit"] + 0.03, (ca["hit"], rr["hit"])
    assert rr["miss_shares"]["routed_away"] > 0.25, rr["miss_shares"]
    assert ca["miss_shares"]["routed_away"] < rr["miss_shares"]["routed_away"] / 2, ca["miss_shares"]
    # the per-replica table on the terminal, and compare naming the routing share
    shown = swarm("report", str(folders["round_robin"]))
    assert "3 replicas" in shown.stdout and "routed away" in shown.stdout, shown.stdout[-3000:]
    compared = swarm("compare", str(folders["round_robin"]), str(folders["cache_aware"]))
    assert compared.returncode == 0, compared.stderr[-2000:]
    assert "misses routed away explain" in compared.stdout, compared.stdout[-3000:]
    as_json = swarm("compare", str(folders["round_robin"]), str(folders["cache_aware"]), "--json")
    routing = json.loads(as_json.stdout)["routing"]
    assert len(routing) == 2 and all(r["replicas"] == 3 for r in routing.values())


def test_a_replica_killed_mid_run_leaves_rows_and_a_loss_in_the_report(
    replicas: list[EmulatorProcess], tmp_path: Path
) -> None:
    urls = [p.url for p in replicas]
    victim = replicas[1]
    with router(urls, "round_robin", tmp_path / "router.log") as url:
        out = tmp_path / "run"
        run = subprocess.Popen(
            [sys.executable, "-m", "swarm", "run", "--target", f"fleet={url}", *SWARM_ARGS, "--agents", "40",
             "--arrival", "constant:3", "--duration", "14", "-o", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        wait_for_counter(victim.url, "sglang:num_requests_total", 30)  # a few seconds of traffic on it
        victim.proc.kill()
        victim.proc.wait(timeout=10)
        _, stderr = run.communicate(timeout=180)
    assert run.returncode == 0, stderr[-3000:]
    folder = run_folder(out)
    assert json.loads((folder / "manifest.json").read_text())["status"] == "complete"
    target = report(folder)
    fleet = target["fleet"]
    (loss,) = fleet["losses"]
    assert loss["replica"] == victim.url
    assert 0.5 < loss["gone_at_s"] < 13.0
    assert loss["sessions_lost_prefix"] >= 1
    assert loss["errors_recovered_after_s"] < 10.0  # the router stops sending to it
    by_replica = {r["replica"]: r for r in fleet["replicas"]}
    assert all(by_replica[u]["requests"] > by_replica[victim.url]["requests"] for u in urls if u != victim.url)
    # every request is a row with a status: what failed is counted, nothing is lost
    figures = target["figures"]
    assert figures["requests"] == sum(r["requests"] for r in fleet["replicas"]) + fleet["unattributed"]
    assert all(r["failed"] == 0 for u, r in by_replica.items() if u != victim.url)  # only its own in flight failed
    print(f"lost replica: {loss}")
