"""A non-editable install carries the built-in agents and topologies as package data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_builtin_profiles_and_topologies(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "whl"), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "whl").glob("*.whl")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp_path / "site"), str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    code = (
        "import swarm.catalog as c\n"
        "d = c.builtin_dir('topologies')\n"
        "assert '_builtin' in str(d), d\n"
        "cat = c.default_catalog()\n"
        "print(sorted(cat.topology_names()), sorted(cat.profile_names()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "tree_of_thought" in out.stdout and "coding_agent" in out.stdout
    assert not (tmp_path / "site" / "agents").exists(), (
        "a top-level 'agents' package would shadow other libraries"
    )
