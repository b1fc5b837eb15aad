"""Package list for setuptools: every package under ``swarm/`` by discovery, plus the
folders of built-in data (``agents/``, ``topologies/``, ``figures/``) shipped inside it as
``swarm._builtin.agents``, ``swarm._builtin.topologies`` and ``swarm._builtin.figures``.

pyproject.toml holds everything else; it cannot combine discovery with a renamed folder, which
is the one thing this file says. Never a top-level ``agents`` package: it would shadow the
OpenAI Agents SDK.
"""

from setuptools import find_packages, setup

BUILTIN_DATA = {
    "swarm._builtin.agents": "agents",
    "swarm._builtin.topologies": "topologies",
    "swarm._builtin.figures": "figures",
}

setup(
    packages=[*find_packages(include=["swarm", "swarm.*"]), *BUILTIN_DATA],
    package_dir=BUILTIN_DATA,
)
