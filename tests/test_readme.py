"""The README's commands and spec example stay true to the code."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from swarm.runtime.specs import RunSpec
from swarm.workload.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_spec_example_is_valid() -> None:
    (block,) = re.findall(r"```yaml\n(.*?)```", README, flags=re.S)
    spec = RunSpec.model_validate(yaml.safe_load(block))
    Workload(spec.workload)  # profiles and topologies it names exist


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.findall(r"```bash\n(.*?)\n```", README, flags=re.S)
    assert "pip install -e . && swarm run" in commands
    assert "pip install -e '.[test]' && python -m pytest" in commands
    assert "pip install -e '.[test]' && python -m pytest" in (ROOT / ".ci" / "run").read_text()


def test_readme_flags_exist() -> None:
    """Every --flag on a README line that runs a swarm command is one of that command's options."""
    from typer.main import get_command

    from swarm.cli import app

    group = get_command(app)
    emulate = {opt for p in group.commands["emulate"].params for opt in (*p.opts, *p.secondary_opts)}  # type: ignore[attr-defined]
    checked = 0
    for line in README.splitlines():
        match = re.match(r"\s*(?:\$\(.*?\)\s*)?swarm (\w+)(.*)", line)
        if not match:
            continue
        command = group.commands.get(match.group(1))  # type: ignore[attr-defined]
        assert command is not None, line
        known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
        words = match.group(2).split("#")[0]
        for flag in re.findall(r"(?<![\w=-])(--[a-z][a-z0-9-]*)", words):
            assert flag in known, (
                f"README: {line.strip()!r}: {flag} is not an option of swarm {match.group(1)}"
            )
            checked += 1
        for flag in re.findall(
            r"--emulator-arg[= ]+(--[a-z][a-z0-9-]*)", words
        ):  # passed on to swarm emulate
            assert flag in emulate, f"README: {line.strip()!r}: {flag} is not an option of swarm emulate"
            checked += 1
    assert checked > 20
