"""A damaged run folder (a manifest that is not one, a part cut short) gets one clean line
from the tools that need all of it (export, replay), a partial answer that says what is
missing from those that can do with less (report, compare), and never a half-written file."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.synthetic import synthetic_record
from swarm.trace.manifest import RunManifest, RunStatus, TargetInfo
from swarm.trace.sink import ParquetTraceSink

SWARM = [sys.executable, "-m", "swarm"]


def _swarm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SWARM, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def _one_clean_line(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("swarm: error:"), out.stderr
    assert "Traceback" not in out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """Two targets; the first written by two writers (two parts), the second by one."""
    run = tmp_path / "run"
    run.mkdir()
    counts = 0
    for writer, target, rows in (
        ("a", "sg", range(0, 120)),
        ("b", "sg", range(120, 240)),
        ("c", "trt", range(240, 400)),
    ):
        with ParquetTraceSink(run, writer=writer) as sink:
            for i in rows:
                sink.write(synthetic_record(i).with_identity(target=target, request_id=f"{target}-{i}"))
                counts += 1
    RunManifest(
        run_id="damaged", status=RunStatus.COMPLETE, seed=0, spec_hash="h", counts={"ok": counts},
        targets=[TargetInfo(name=n, url="http://127.0.0.1:1", engine=e, dialect="openai-chat")
                 for n, e in (("sg", "sglang"), ("trt", "trtllm"))],
    ).write(run)  # fmt: skip
    return run


def _truncate_part(run: Path, writer: str) -> Path:
    (part,) = (run / "requests").glob(f"part-{writer}-*.parquet")
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])
    return part


@pytest.mark.parametrize(
    ("manifest_text", "needle"),
    [
        ('{"run_id": 5, "status": "done"}', "not a swarm run manifest: run_id"),
        ("{not json", "not valid JSON"),
    ],
)
def test_a_manifest_that_is_not_one_gets_one_line_from_every_command(
    run_dir: Path, tmp_path: Path, manifest_text: str, needle: str
) -> None:
    (run_dir / "manifest.json").write_text(manifest_text)
    for args in (["export", str(run_dir)], ["export", str(run_dir), "--format", "csv"], ["replay", str(run_dir)],
                 ["report", str(run_dir)], ["compare", str(run_dir)]):  # fmt: skip
        _one_clean_line(_swarm(*args, cwd=tmp_path), "manifest.json", needle)


def test_a_truncated_part_stops_export_and_replay_and_leaves_no_file(run_dir: Path, tmp_path: Path) -> None:
    part = _truncate_part(run_dir, "b")
    for fmt in ("mooncake", "csv"):
        out = tmp_path / f"x.{fmt}"
        _one_clean_line(
            _swarm("export", str(run_dir), "--format", fmt, "-o", str(out), cwd=tmp_path), part.name
        )
        assert not out.exists()
        out.write_text("what was there before\n")
        _one_clean_line(_swarm("export", str(run_dir), "--format", fmt, "--output", str(out), cwd=tmp_path))
        assert out.read_text() == "what was there before\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary left either
    _one_clean_line(_swarm("replay", str(run_dir), cwd=tmp_path), part.name, "cannot read this trace part")


def test_report_and_compare_read_around_a_truncated_part_and_say_so(run_dir: Path, tmp_path: Path) -> None:
    part = _truncate_part(run_dir, "b")
    out = _swarm("report", str(run_dir), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["targets"]["sg"]["figures"]["requests"] == 120  # the readable part
    assert report["targets"]["trt"]["figures"]["requests"] == 160
    warnings = report["warnings"]
    named = [w for w in warnings if part.name in w]
    assert len(named) == 1 and re.search(r"cannot be read and is left out: about \d+ rows", named[0]), (
        warnings
    )
    assert any("the readable parts hold 280 of the 400 requests the manifest counts" in w for w in warnings)
    text = _swarm("report", str(run_dir), cwd=tmp_path)
    assert text.returncode == 0 and part.name in text.stdout
    compared = _swarm("compare", str(run_dir), "--json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert any(part.name in w for w in json.loads(compared.stdout)["warnings"])


def test_export_writes_csv_for_a_spreadsheet(run_dir: Path, tmp_path: Path) -> None:
    import csv

    out = _swarm("export", str(run_dir), "--format", "csv", "--source-target", "trt", "-o", "t.csv", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    with (tmp_path / "t.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 160 and {r["target"] for r in rows} == {"trt"}
    first = synthetic_record(240)
    row = next(r for r in rows if r["request_id"] == "trt-240")
    assert int(row["chunks"]) == len(first.chunk_ns) and row["parent_nodes"] == ";".join(
        first.identity.parent_nodes
    )
    assert int(row["ttft_ns"]) == first.ttft_ns and "chunk_ns" not in row
    assert dataclasses.asdict(first.identity)["node"] == row["node"]


def test_damaged_server_metrics_are_left_out_of_the_report_and_said(run_dir: Path, tmp_path: Path) -> None:
    (run_dir / "server_metrics.parquet").write_bytes(b"PAR1 cut short")
    out = _swarm("report", str(run_dir), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["targets"]["sg"]["server"] is None
    assert any(
        "scraped metrics cannot be read" in w and "server_metrics.parquet" in w for w in report["warnings"]
    )


def test_export_into_a_missing_folder_is_one_line_and_a_new_file_gets_the_usual_mode(
    run_dir: Path, tmp_path: Path
) -> None:
    _one_clean_line(
        _swarm("export", str(run_dir), "-o", "nowhere/x.jsonl", cwd=tmp_path), "no folder nowhere"
    )
    out = _swarm("export", str(run_dir), "-o", "x.jsonl", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "x.jsonl").stat().st_mode & 0o777 == 0o666 & ~umask  # not a temporary file's 0600
