"""Waiting for a real engine's server the engine tests start (llama.cpp, vLLM) to be healthy."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def wait_healthy(
    proc: subprocess.Popen[bytes], url: str, name: str, log_path: Path, timeout_s: float
) -> None:
    """Return once ``url + "/health"`` answers 200; a RuntimeError naming ``log_path`` when the
    process exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}: see {log_path}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} not healthy after {timeout_s:.0f} s: see {log_path}")
        time.sleep(0.2)
