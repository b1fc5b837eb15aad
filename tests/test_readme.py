"""The README's commands and spec example stay true to the code."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from swarm.run import RunSpec
from swarm.workload import Workload

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
