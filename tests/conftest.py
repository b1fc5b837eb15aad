"""Shared fixtures: emulators on loopback (in a thread, or as a separate process)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from swarm.emulator.config import EmulatorConfig
from swarm.emulator.http_server import EmulatorThread

# Local test clusters need no token authentication (Ray 2.60 turns it on by default).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# Modules that run for minutes in one test or two. pytest-xdist hands out whole modules
# (``--dist loadfile``); left to its own order (most tests first) these came last and ran alone
# at the end of the suite. Quiet, 2026-12-04: the engine twins ~416 s, the soak ~124 s.
START_FIRST = ("test_engine_twins.py", "test_soak.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order modules for the two processes: ``START_FIRST`` in its order, then the others by
    number of tests, most first (xdist's own order, off in ``pyproject.toml`` so this one holds)."""
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def rank(module: str) -> tuple[int, int]:
        name = module.rsplit("/", 1)[-1]
        first = START_FIRST.index(name) if name in START_FIRST else len(START_FIRST)
        return first, -len(by_module[module])

    items[:] = [item for module in sorted(by_module, key=rank) for item in by_module[module]]


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """One local Ray for the whole session (starting one takes ~5 s and ~850 MB)."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        # "local": never the cluster a stale address file names
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    if started:
        ray.shutdown()


@pytest.fixture
def emulator() -> Iterator[Callable[..., EmulatorThread]]:
    """Factory: ``emulator(engine="sglang", **config)`` starts one on a free loopback port."""
    started: list[EmulatorThread] = []

    def start(**overrides: Any) -> EmulatorThread:
        cfg = EmulatorConfig(**{"port": 0, **overrides})
        emu = EmulatorThread(cfg).start()
        started.append(emu)
        return emu

    yield start
    for emu in started:
        emu.stop()


class EmulatorProcess:
    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "swarm", "emulate", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"listening on (http://\S+)", line)
        if not match:
            self.proc.kill()
            raise RuntimeError(
                f"emulator did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        self.url = match.group(1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def emulator_process() -> Iterator[Callable[..., EmulatorProcess]]:
    """Factory: ``emulator_process("--engine", "trtllm", ...)`` runs ``swarm emulate`` as a process."""
    started: list[EmulatorProcess] = []

    def start(*args: str) -> EmulatorProcess:
        p = EmulatorProcess(list(args))
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()
