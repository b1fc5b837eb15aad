"""A calibrated twin's error, held against its engine once and stated by every simulation of it
(issue 30: a simulated figure inherits its twin's measured error).

The engine's sweep here is the default sglang twin's, simulated: `swarm compare` holds any two
sweeps of one ladder against each other, and the test needs known figures, not a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from engine_workload import write_spec_files

SWARM = [sys.executable, "-m", "swarm"]

CALIBRATION = {
    "format": "swarm-calibration", "version": 1, "engine": "sglang", "url": "http://127.0.0.1:1",
    "measured_at": "2026-12-03T00:00:00+00:00", "complete": True,
    "parameters": {"step_base_ms": 20.0, "prefill_ms_per_token": 0.05, "prefill_ms_per_cached_token": 0.005,
                   "decode_ms_per_seq": 0.5},
}  # fmt: skip


def _swarm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SWARM, *args], capture_output=True, text=True, timeout=300)


def _sweep(tmp: Path, name: str, *extra: str) -> Path:
    done = _swarm(
        "sweep", "--simulate", "--engine", "sglang", "--ladder", "agents=2,6",
        "--profile", str(tmp / "tiny_reasoner.yaml"), "--topology", str(tmp / "tot_2x2.yaml"),
        "--arrival", "all_at_once", "--output", str(tmp / name), "--no-progress", "--json", *extra,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(json.loads(done.stdout)["sweep"]["folder"])


def test_a_twins_recorded_error_is_stated_by_every_simulation_of_it(tmp_path: Path) -> None:
    write_spec_files(tmp_path)
    calibration = tmp_path / "sglang.yaml"
    calibration.write_text(yaml.safe_dump(CALIBRATION), encoding="utf-8")
    engine = _sweep(tmp_path, "engine")
    twin = _sweep(tmp_path, "twin", f"--emulator-arg=--calibration={calibration}")

    # before it is held against its engine, a simulation says its error is not measured
    done = _swarm("sweep", "--simulate", "--engine", "sglang", "--ladder", "agents=2",
                  "--profile", str(tmp_path / "tiny_reasoner.yaml"), "--topology", str(tmp_path / "tot_2x2.yaml"),
                  "--arrival", "all_at_once", "--output", str(tmp_path / "again"), "--no-progress",
                  f"--emulator-arg=--calibration={calibration}")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "was never held against sglang" in done.stdout

    done = _swarm("compare", str(engine), str(twin), "--record-error", str(calibration), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = json.loads(done.stdout)["recorded"]
    errors: dict[str, Any] = recorded["errors"]
    assert set(errors) >= {"ttft_ms.p50", "ttft_ms.p99", "output_tokens_per_s", "e2e_ms.p50"}
    assert errors["ttft_ms.p50"] > 0.05  # a 20 ms step against the default's: the twins differ
    held = yaml.safe_load(calibration.read_text(encoding="utf-8"))["held_against"]
    assert held["errors"] == errors and held["engine_sweep"] == str(engine)

    # a simulation of the twin carries it: in its manifest, and as a warning of its report
    done = _swarm("simulate", "--engine", "sglang", f"--emulator-arg=--calibration={calibration}",
                  "--profile", str(tmp_path / "tiny_reasoner.yaml"), "--topology", str(tmp_path / "tot_2x2.yaml"),
                  "--agents", "2", "--arrival", "all_at_once", "--output", str(tmp_path / "runs"),
                  "--no-progress", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = json.loads(done.stdout)["run_dir"]
    manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
    (twin_entry,) = manifest["simulated"]["twins"]
    assert twin_entry["calibrated"]["errors"] == errors
    done = _swarm("report", run_dir, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [w for w in json.loads(done.stdout)["warnings"] if "carry its measured error against sglang" in w]
    assert f"TTFT p50 ±{errors['ttft_ms.p50']:.1%}" in line


def test_recording_a_twins_error_is_refused_for_another_engine_or_one_sweep(tmp_path: Path) -> None:
    write_spec_files(tmp_path)
    other = tmp_path / "trtllm.yaml"
    other.write_text(yaml.safe_dump({**CALIBRATION, "engine": "trtllm"}), encoding="utf-8")
    engine = _sweep(tmp_path, "engine")
    twin = _sweep(tmp_path, "twin")
    done = _swarm("compare", str(engine), str(twin), "--record-error", str(other))
    assert done.returncode != 0 and f"{other}: engine: trtllm" in done.stderr
    assert "held_against" not in other.read_text(encoding="utf-8")
    done = _swarm("compare", str(engine), "--record-error", str(other))
    assert done.returncode != 0 and "two sweep folders" in done.stderr
