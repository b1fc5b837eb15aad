"""The built wheel is the tool: installed into a fresh venv, away from the checkout, every
module imports and the main commands run.

The venv has no system site-packages, so neither the checkout nor its editable install
(whose import hook would find a module the wheel left out) is on its path. The
dependencies are not downloaded again: a path line points the venv at this interpreter's
site-packages (a path line does not run that folder's ``.pth`` files, so the editable hook
stays out), and the wheel's own ``Requires-Dist`` is checked to name every third-party
package its modules import.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

IMPORT_ALL = r"""
import importlib, json, pkgutil, sys
import swarm
names = sorted(
    m.name for m in pkgutil.walk_packages(swarm.__path__, "swarm.") if not m.name.endswith("__main__")
)
for name in names:
    importlib.import_module(name)
import swarm.workload.catalog as c
cat = c.default_catalog()
roots = {n.split(".")[0] for n in sys.modules} - set(sys.stdlib_module_names) - {"swarm", "__main__"}
print(json.dumps({
    "file": swarm.__file__, "path": sys.path, "modules": names,
    "builtin_dir": str(c.builtin_dir("topologies")),
    "topologies": sorted(cat.topology_names()), "profiles": sorted(cat.profile_names()),
    "third_party_roots": sorted(roots),
}))
"""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_roots(package: Path) -> set[str]:
    """Top-level names the package's modules import anywhere (lazy imports included)."""
    roots: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                roots |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots.add(node.module.split(".")[0])
    return roots - set(sys.stdlib_module_names) - {"swarm"}


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_runs(tmp_path: Path) -> None:
    # built from a copy of the sources: a build/ folder left in the checkout by an earlier
    # build would otherwise lend the wheel modules its package list leaves out
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "runs", "__pycache__"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "whl"), str(source)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "whl").glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python, swarm_cmd = venv / "bin" / "python", venv / "bin" / "swarm"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "-q", "--disable-pip-version-check", str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "RAY_AUTH_MODE": "disabled"}

    out = subprocess.run([python, "-c", IMPORT_ALL], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["file"].startswith(str(venv)), seen["file"]
    assert not any(p and Path(p).resolve() == ROOT for p in seen["path"]), seen["path"]
    # every module of the package made it into the wheel (the checkout's list is the truth)
    in_checkout = set()
    for path in (ROOT / "swarm").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        in_checkout.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    missing = {m for m in in_checkout - set(seen["modules"]) - {"swarm"} if not m.endswith("__main__")}
    assert not missing, f"modules left out of the wheel: {sorted(missing)}"
    assert "_builtin" in seen["builtin_dir"] and str(venv) in seen["builtin_dir"]
    assert "tree_of_thought" in seen["topologies"] and "coding_agent" in seen["profiles"]
    assert not (Path(purelib) / "agents").exists(), (
        "a top-level 'agents' package would shadow other libraries"
    )

    # every third-party package the modules import is a declared dependency (or an extra's)
    dist_info = next(Path(purelib).glob("swarm_loadgen-*.dist-info"))
    declared = {
        _norm(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0])
        for r in metadata.PathDistribution(dist_info).requires or []
    }
    providers = metadata.packages_distributions()
    undeclared = {
        root: providers.get(root) for root in _imported_roots(Path(purelib) / "swarm")
        if not any(_norm(d) in declared for d in providers.get(root, []))
    }  # fmt: skip
    assert not undeclared, f"imported but not declared by the wheel: {undeclared}"

    version = subprocess.run([swarm_cmd, "--version"], capture_output=True, text=True, env=env)
    assert version.returncode == 0 and re.fullmatch(r"swarm \d+\.\d+\.\d+\S*\n", version.stdout)

    run = subprocess.run(
        # the emulators answer at once (zero timing): what is tested is the installed package
        [swarm_cmd, "run", "--agents", "20", "--profile", "tree_of_thought", "--emulator-arg=--timing",
         "--emulator-arg=zero", "--duration", "5", "--executor", "inprocess", "--output", str(tmp_path / "runs"),
         "--no-progress", "--json"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert result["status"] == "complete"
    assert {t["requests"] > 0 and t["errors"] == 0 for t in result["targets"].values()} == {True}
    report = subprocess.run(
        [swarm_cmd, "report", result["run_dir"], "--json"], cwd=tmp_path, capture_output=True, text=True,
        env=env, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    assert set(json.loads(report.stdout)["targets"]) == set(result["targets"])
    exported = subprocess.run(
        [swarm_cmd, "export", result["run_dir"], "-o", str(tmp_path / "x.jsonl")],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert (tmp_path / "x.jsonl").read_text().count("\n") > 0
