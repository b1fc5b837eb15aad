"""SGLang's router (``sglang-router`` on PyPI, a Rust binary) in front of servers on loopback, for
the fleet tests: started on free ports, its Prometheus listener on loopback too, waited for until
it lists every worker healthy, stopped with its whole process group."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def available() -> None:
    """Skip (fail in CI, which installs it) where the router is not installed."""
    try:
        import sglang_router  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("the fleet tests need sglang-router in CI (.ci/run installs it)")
        pytest.skip("sglang-router is not installed (pip install sglang-router)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy_workers(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/workers", timeout=2) as resp:
            data = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return -1
    workers = data.get("workers", []) if isinstance(data, dict) else []
    return sum(1 for w in workers if isinstance(w, dict) and w.get("is_healthy"))


def wait_for_counter(url: str, metric: str, at_least: float, timeout_s: float = 120) -> None:
    """Until the server at ``url`` counts ``at_least`` of ``metric`` on ``/metrics`` (traffic
    has reached it, however slowly the run started on a busy machine)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=2) as resp:
                text = resp.read().decode()
            if sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(metric)) >= at_least:
                return
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not count {at_least:g} of {metric} within {timeout_s:.0f} s")


@contextlib.contextmanager
def router(workers: list[str], policy: str, log_path: Path, timeout_s: float = 60) -> Iterator[str]:
    """The router's URL, in front of ``workers`` with ``policy``, until the block ends."""
    port = free_port()
    args = [
        sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), "--policy", policy,
        "--worker-urls", *workers, "--log-level", "warn",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while _healthy_workers(url) < len(workers):
            if proc.poll() is not None:
                raise RuntimeError(f"the router exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the router did not list {len(workers)} healthy workers in {timeout_s:.0f} s")
            time.sleep(0.2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
