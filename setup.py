"""Package list for setuptools: every package under ``swarm/`` by discovery, plus the two
folders of built-in data (``agents/``, ``topologies/``) shipped inside it as
``swarm._builtin.agents`` and ``swarm._builtin.topologies``.

pyproject.toml holds everything else; it cannot combine discovery with a renamed folder, which
is the one thing this file says. Never a top-level ``agents`` package: it would shadow the
OpenAI Agents SDK.
"""

from setuptools import find_packages, setup

BUILTIN_DATA = {"swarm._builtin.agents": "agents", "swarm._builtin.topologies": "topologies"}

setup(
    packages=[*find_packages(include=["swarm", "swarm.*"]), *BUILTIN_DATA],
    package_dir=BUILTIN_DATA,
)
