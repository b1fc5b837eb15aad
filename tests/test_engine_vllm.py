"""A second real engine: vLLM's CPU build with automatic prefix caching, Gemma 3 270M, on loopback.

One server for the module (ready in about 75 s on 2 cores): ``swarm probe`` identifies it, a
small swarm runs against it and its own hit counters agree with the trace, a replay of that
run, and the emulator's ``vllm`` profile gives the same cached tokens as the server, request
for request. Marked ``engine``; skipped where the venv or the converted model is missing,
except in CI, where ``.ci/run`` prepares them and a missing one is a failure.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from engine_workload import CALLS_PER_AGENT, write_spec_files
from vllm_server import BLOCK_TOKENS, MODEL_DIR, SERVED_NAME, locate, vllm_server

from swarm.analysis import metrics as m
from swarm.emulator.http_server import EmulatorThread
from swarm.trace.manifest import RunManifest
from swarm.trace.reader import read_requests

pytestmark = pytest.mark.engine

SWARM = [sys.executable, "-m", "swarm.cli"]
#: agents per swarm: 2 x 8 calls, about 1 s each on vLLM's CPU build
AGENTS = 2


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    found = locate()
    if isinstance(found, str):
        if os.environ.get("CI"):
            pytest.fail(f"engine tests need vLLM in CI: {found}")
        pytest.skip(found)
    python, model = found
    with vllm_server(python, model, tmp_path_factory.mktemp("vllm") / "server.log") as url:
        yield url


@pytest.fixture(scope="module")
def spec_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("spec")
    write_spec_files(folder)
    return folder


def _counters(url: str) -> tuple[float, float]:
    """(prefix-cache hits, queries) from the server's own metrics, in tokens."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()

    def total(name: str) -> float:
        return sum(float(v) for v in re.findall(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE))

    return total("vllm:prefix_cache_hits_total"), total("vllm:prefix_cache_queries_total")


def _swarm(folder: Path, targets: list[str], *extra: str, seed: int = 0) -> str:
    target_flags = [flag for t in targets for flag in ("--target", t)]
    out = subprocess.run(
        [
            *SWARM, "run", *target_flags, "--agents", str(AGENTS), "--system-prompts", "1", "--seed", str(seed),
            "--profile", str(folder / "tiny_reasoner.yaml"), "--topology", str(folder / "tot_2x2.yaml"),
            "--arrival", "constant:0.5", "--max-in-flight", "1", "--executor", "inprocess",
            "--output", str(folder / "runs"), "--json", *extra,
        ],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return str(json.loads(out.stdout)["run_dir"])


@pytest.fixture(scope="module")
def swarm_run(vllm: str, spec_files: Path) -> tuple[str, tuple[float, float]]:
    """2 agents, branching 2, depth 2, one request at a time; the server's counters' growth."""
    before = _counters(vllm)
    run = _swarm(spec_files, [f"vllm={vllm}"])
    after = _counters(vllm)
    return run, (after[0] - before[0], after[1] - before[1])


def test_probe_identifies_vllm_its_model_block_size_and_cache_reporting(vllm: str) -> None:
    out = subprocess.run([*SWARM, "probe", vllm, "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["engine"] == "vllm" and result["emulator"] is False
    assert result["model"] == SERVED_NAME
    assert result["block_tokens"] == BLOCK_TOKENS
    assert result["cache_reported"] is True
    assert result["second_cached_tokens"] > 0 and result["second_cached_tokens"] % BLOCK_TOKENS == 0


def test_swarm_on_vllm_agrees_with_the_servers_own_counters(
    swarm_run: tuple[str, tuple[float, float]],
) -> None:
    run, (hits, queries) = swarm_run
    table = read_requests(run)
    manifest = RunManifest.read(run)
    assert manifest.targets[0].engine == "vllm" and not manifest.targets[0].emulated
    assert table.num_rows == AGENTS * CALLS_PER_AGENT
    assert set(table["status"].to_pylist()) == {"ok"}, m.errors(table)
    cached = table["cached_tokens"].to_pylist()
    assert all(c % BLOCK_TOKENS == 0 for c in cached)  # whole blocks only
    assert sum(cached) > 0
    # the engine's counters and the trace count the same tokens
    assert sum(cached) == hits
    assert sum(table["prompt_tokens"].to_pylist()) == queries


def test_replay_against_vllm(swarm_run: tuple[str, tuple[float, float]], vllm: str, tmp_path: Path) -> None:
    run, _ = swarm_run
    out = subprocess.run(
        [*SWARM, "replay", run, "--target", f"vllm={vllm}", "--output", str(tmp_path), "--json", "--executor", "inprocess"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    replayed = read_requests(json.loads(out.stdout)["run_dir"])
    original = read_requests(run)
    assert replayed.num_rows == original.num_rows
    assert set(replayed["status"].to_pylist()) == {"ok"}
    key = ("session_id", "node", "prompt_tokens")
    assert sorted(zip(*(replayed[k].to_pylist() for k in key), strict=True)) == sorted(
        zip(*(original[k].to_pylist() for k in key), strict=True)
    )


def test_the_emulators_vllm_profile_caches_what_the_server_caches(
    vllm: str, spec_files: Path, emulator: Callable[..., EmulatorThread]
) -> None:
    """The same seeded swarm, as completions prompts (no chat template to tell apart), one
    request at a time, to the real server and to the emulator counting with the model's own
    tokenizer: the same prompt and cached tokens, request for request."""
    request = urllib.request.Request(vllm + "/reset_prefix_cache", method="POST")
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200 and json.loads(resp.read()) == {"success": True}
    emu = emulator(
        engine="vllm", timing="zero", cache_capacity_tokens=None, tokenizer=str(MODEL_DIR / "tokenizer.json")
    )
    run = _swarm(
        spec_files, [f"vllm={vllm}", f"emu={emu.url}"], "--dialect", "openai-completions", "--model", SERVED_NAME,
        seed=7,
    )  # fmt: skip
    table = read_requests(run)
    rows: dict[str, dict[tuple[str, str], tuple[int, int]]] = {"vllm": {}, "emu": {}}
    for r in table.to_pylist():
        rows[r["target"]][(r["session_id"], r["node"])] = (r["prompt_tokens"], r["cached_tokens"])
    assert len(rows["vllm"]) == len(rows["emu"]) == AGENTS * CALLS_PER_AGENT
    assert rows["emu"] == rows["vllm"]
    assert any(cached for _, cached in rows["vllm"].values())
