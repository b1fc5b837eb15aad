"""swarm report and swarm compare on real emulator runs; the HTML report in a real Chromium."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser import chromium_path, visit

from swarm.analysis.compare import WorkloadMismatch, compare
from swarm.analysis.html import render_html
from swarm.analysis.metrics import SLO
from swarm.analysis.report import build_report, build_run_report, load_run
from swarm.emulator.http_server import EmulatorThread
from swarm.launch import execute_run
from swarm.runtime.specs import RunSpec, TargetSpec
from swarm.workload.arrival import ArrivalSpec
from swarm.workload.workload import MixEntry, WorkloadSpec


def _run(url: str, engine: str, out: Path, seed: int = 0) -> str:
    spec = RunSpec(
        workload=WorkloadSpec(
            agents=10,
            seed=seed,
            mix=[MixEntry(profile="math_reasoner", topology="tree_of_thought")],
            arrival=ArrivalSpec(process="constant", rate=5),
        ),
        targets=[TargetSpec(name=engine, url=url, engine=engine)],
        output_dir=str(out),
        executor="inprocess",
    )
    return str(execute_run(spec).run_dir)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """The same workload against the emulator as sglang and as trtllm, and one of another seed.
    Prefill is made expensive (0.5 ms per uncached token) so that reuse shows in TTFT."""
    from swarm.emulator.config import EmulatorConfig

    out = tmp_path_factory.mktemp("runs")
    emulators = [
        EmulatorThread(
            EmulatorConfig(port=0, engine=engine, prefill_ms_per_token=0.5, cache_capacity_tokens=None)
        )
        for engine in ("sglang", "trtllm")
    ]
    for e in emulators:
        e.start()
    try:
        sglang = _run(emulators[0].url, "sglang", out)
        trtllm = _run(emulators[1].url, "trtllm", out)
        other_seed = _run(emulators[0].url, "sglang", out, seed=1)
    finally:
        for e in emulators:
            e.stop()
    return sglang, trtllm, other_seed


def test_report_has_every_figure_and_the_engines_own_metrics(two_runs: tuple[str, str, str]) -> None:
    run = load_run(two_runs[0])
    report = build_report(run, SLO(ttft_ms=500))
    entry = report["targets"]["sglang"]
    fig = entry["figures"]
    assert fig["requests"] == fig["ok"] > 0
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "first_call_ttft_ms", "branch_call_ttft_ms"):
        assert fig[key]["count"] > 0 and fig[key]["p50"] > 0, key
    assert fig["sessions"]["count"] == 10
    assert fig["goodput"]["good"] > 0
    assert fig["throughput"]["peak_output_tokens_per_s"] >= fig["throughput"]["output_tokens_per_s"] > 0
    assert {"depth", "role"} <= set(entry["breakdowns"])
    # the engine's own view, scraped during the run, agrees with what the client saw
    server = entry["server"]
    assert server is not None and server["scrapes"] >= 2
    assert server["cache_hit_ratio"] == pytest.approx(fig["cache"]["hit_ratio"], abs=0.02)
    assert server["queue"]["metric"] == "sglang:num_queue_reqs"


def test_compare_shows_sglang_ahead_on_reuse_and_refuses_other_seeds(two_runs: tuple[str, str, str]) -> None:
    sglang, trtllm, other_seed = two_runs
    result = compare([load_run(sglang), load_run(trtllm)], tie_within=0.0)  # any lead, however small
    rows = {r["dimension"]: r for r in result.rows}
    assert result.columns == ["sglang", "trtllm"]
    assert rows["cache hit ratio"]["leader"] == "sglang" and rows["cache hit ratio"]["ratio"] > 1
    assert rows["prefill tokens saved"]["leader"] == "sglang"  # counts, not a race of two timings
    assert rows["ideal hit ratio"]["values"][0] == rows["ideal hit ratio"]["values"][1]  # same traffic
    # where the reuse went: the radix cache keeps every token, the block cache loses partial blocks
    sg, trt = result.reuse["sglang"], result.reuse["trtllm"]
    assert (sg["block_tokens"], trt["block_tokens"]) == (1, 32)
    assert sg["granularity_lost"] == 0 and trt["granularity_lost"] > 0
    assert sg["other_lost"] == trt["other_lost"] == 0  # unbounded caches evict nothing
    assert trt["cached_tokens"] == trt["ideal_tokens"] - trt["granularity_lost"] + trt["beyond"]
    with pytest.raises(WorkloadMismatch, match="--force"):
        compare([load_run(sglang), load_run(other_seed)])
    forced = compare([load_run(sglang), load_run(other_seed)], force=True)
    assert forced.warnings and forced.columns[0].endswith(":sglang")


def test_cli_report_json_and_compare_refusal(two_runs: tuple[str, str, str], tmp_path: Path) -> None:
    sglang, trtllm, other_seed = two_runs
    swarm = [sys.executable, "-m", "swarm.cli"]
    out = subprocess.run(
        [*swarm, "report", sglang, "--json", "--slo", "ttft:1s"], capture_output=True, text=True, check=True
    )
    data = json.loads(out.stdout)
    assert data["slo"] == "ttft<=1000ms" and data["targets"]["sglang"]["figures"]["goodput"]["good"] > 0
    out = subprocess.run(
        [*swarm, "compare", sglang, trtllm, "--tie-within", "0"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "cache hit ratio" in out.stdout and "sglang (" in out.stdout
    out = subprocess.run([*swarm, "compare", sglang, other_seed], capture_output=True, text=True)
    assert out.returncode == 2 and "workloads differ" in out.stderr and "--force" in out.stderr
    out = subprocess.run([*swarm, "report", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 2 and "manifest" in out.stderr
    out = subprocess.run([*swarm, "report", sglang, "--slo", "ttft:soon"], capture_output=True, text=True)
    assert out.returncode == 2 and "--slo" in out.stderr


def test_html_report_in_headless_chromium(two_runs: tuple[str, str, str], tmp_path: Path) -> None:
    if chromium_path() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: .ci/run installs Debian's chromium")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    run = load_run(two_runs[0])
    page = tmp_path / "report.html"
    page.write_text(render_html(run, build_run_report(run)), encoding="utf-8")
    assert "<script" not in page.read_text() and "http://" not in page.read_text().replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )  # self-contained: nothing to fetch
    seen = visit(
        page,
        "Array.from(document.querySelectorAll('figure.plot')).map(f => ({id: f.id, "
        "points: Array.from(f.querySelectorAll('path.series')).map(p => Number(p.dataset.points)), "
        "width: f.getBoundingClientRect().width}))",
        tmp_path / "report.png",
        tmp_path / "chromium-profile",
    )
    assert seen.errors == []
    plots = {p["id"]: p for p in seen.value}
    expected = {"ttft-cdf", "e2e-cdf", "ttft-depth", "cache-depth", "throughput-time", "inflight-time",
                "completion-cdf", "server-cache-time", "server-queue-time"}  # fmt: skip
    assert expected <= set(plots)
    for plot_id, plot in plots.items():
        assert plot["points"] and all(n > 0 for n in plot["points"]), plot_id
        assert plot["width"] > 100, plot_id
    assert seen.screenshot is not None and seen.screenshot.stat().st_size > 10_000
