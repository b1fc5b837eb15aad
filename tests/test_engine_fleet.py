"""A fleet of real engines: SGLang's router (``sglang-router``) in front of two llama.cpp
servers (Gemma 3 270M), one of them killed mid-run.

llama.cpp does not name itself in its responses, so no request names its replica: the report
splits the fleet by each server's own scraped counters (prompt tokens, hit) and judges the
killed one lost by its scrapes stopping and the requests that failed after. Marked ``engine``;
skipped where llama.cpp or the router is missing, except in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_workload import write_spec_files
from llama_server import locate
from server_process import wait_healthy
from sglang_router_helper import available, wait_for_counter

from bench.router import free_port
from bench.router import sglang_router as router
from swarm.trace.reader import read_requests

pytestmark = pytest.mark.engine

SWARM = [sys.executable, "-m", "swarm.cli"]


def _llama(binary: str, model: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = [
        binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "4096", "--parallel", "2",
        "-t", "1", "--metrics", "--no-webui",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url, "llama-server", log, 120)
    return proc, url


def test_a_llamacpp_fleet_behind_the_router_loses_a_server_and_the_report_says_so(tmp_path: Path) -> None:
    found = locate()
    if isinstance(found, str):
        if os.environ.get("CI"):
            pytest.fail(f"engine tests need llama.cpp in CI: {found}")
        pytest.skip(found)
    available()
    binary, model = found
    write_spec_files(tmp_path)
    servers = []
    try:
        for i in range(2):
            servers.append(_llama(binary, model, tmp_path / f"llama{i}.log"))
        urls = [url for _, url in servers]
        with router(urls, "round_robin", tmp_path / "router.log") as url:  # both busy when one is killed
            run = subprocess.Popen(
                [*SWARM, "run", "--target", f"fleet={url}", "--engine", "llamacpp", "--executor", "inprocess",
                 "--profile", str(tmp_path / "tiny_reasoner.yaml"), "--topology", str(tmp_path / "tot_2x2.yaml"),
                 "--agents", "40", "--arrival", "constant:1", "--duration", "30", "--seed", "1",
                 "--output", str(tmp_path / "runs"), "--json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            # killed once it has computed a prompt and been scraped since (the report splits the fleet
            # by the servers' counters), early enough that the run goes on for a while without it
            wait_for_counter(urls[1], "llamacpp:prompt_tokens_total", 1)
            time.sleep(2.5)  # two scrape rounds (--metrics-interval 1)
            killed_ns = time.time_ns()
            servers[1][0].kill()
            servers[1][0].wait(timeout=10)
            stdout, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr[-3000:]
        folder = json.loads(stdout)["run_dir"]
        manifest = json.loads((Path(folder) / "manifest.json").read_text())
        assert sorted(manifest["targets"][0]["replicas"]) == sorted(urls)
        done = subprocess.run([*SWARM, "report", folder, "--json"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        (target,) = json.loads(done.stdout)["targets"].values()
        fleet = target["fleet"]
        print(f"llama.cpp fleet: {json.dumps(fleet, indent=1)[:3000]}")
        assert fleet["attributed_by"] is None  # llama.cpp does not name itself
        by_replica = {r["replica"]: r for r in fleet["replicas"]}
        assert all((by_replica[u]["server_prompt_tokens"] or 0) > 0 for u in urls)  # both served, by their counters
        rows = read_requests(folder).to_pylist()
        start = min(r["sent_ns"] for r in rows)
        killed = f"killed {(killed_ns - start) / 1e9:.1f} s into the run, last send at {(max(r['sent_ns'] for r in rows) - start) / 1e9:.1f} s"
        print(killed)
        assert len(fleet["losses"]) == 1, killed
        (loss,) = fleet["losses"]
        assert loss["replica"] == urls[1] and loss["sessions_lost_prefix"] is None
        # every request is a row with a status, and the run went on on the other server
        assert all(r["status"] for r in rows)
        assert any(r["status"] == "ok" and r["sent_ns"] - start > (loss["gone_at_s"] + 3) * 1e9 for r in rows)
    finally:
        for proc, _ in servers:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=15)
