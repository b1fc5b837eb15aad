"""What the fleet tests need besides SGLang's router itself (``bench.router.sglang_router``
starts it): whether it is installed, and a wait until traffic has reached a server."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request

import pytest


def available() -> None:
    """Skip (fail in CI, which installs it) where the router is not installed."""
    try:
        import sglang_router  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("the fleet tests need sglang-router in CI (.ci/run installs it)")
        pytest.skip("sglang-router is not installed (pip install sglang-router)")


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
