"""The command line: instant help, and one clear line with exit code 2 for bad input."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable

import pytest


def swarm(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarm", *args], capture_output=True, text=True, timeout=timeout
    )


def test_help_imports_no_heavy_module() -> None:
    code = (
        "import sys\n"
        "from swarm.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('aiohttp', 'pyarrow', 'ray', 'numpy', 'pydantic', 'networkx') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout


def test_help_lists_commands() -> None:
    out = swarm("--help")
    assert out.returncode == 0
    for command in ("emulate", "probe"):
        assert command in out.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def assert_one_line_error(out: subprocess.CompletedProcess[str], needle: str) -> None:
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("swarm: error:"), out.stderr
    assert needle in lines[0]
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("url", ["nonsense", "ftp://127.0.0.1:1", "http://127.0.0.1:99999"])
def test_invalid_url(url: str) -> None:
    assert_one_line_error(swarm("probe", url), "invalid URL")


def test_unreachable_target() -> None:
    assert_one_line_error(
        swarm("probe", f"http://127.0.0.1:{free_port()}"), "connection refused at http://127.0.0.1:"
    )


def test_unknown_engine_profile() -> None:
    assert_one_line_error(
        swarm("probe", "http://127.0.0.1:1", "--engine", "tgi"), "unknown engine profile 'tgi'"
    )
    assert_one_line_error(
        swarm("emulate", "--engine", "tgi"), "--engine: Input should be 'sglang', 'trtllm', 'vllm' or 'llamacpp'"
    )


def test_port_in_use_for_the_emulator() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert_one_line_error(
            swarm("emulate", "--port", str(port)), f"port {port} on 127.0.0.1 is already in use"
        )


def test_bad_emulator_setting() -> None:
    assert_one_line_error(swarm("emulate", "--timing", "warp"), "--timing")


def test_probe_identifies_emulators(emulator_process: Callable[..., object]) -> None:
    sg = emulator_process("--engine", "sglang")
    out = swarm("probe", sg.url)  # type: ignore[attr-defined]
    assert out.returncode == 0, out.stderr
    assert "SGLang (swarm emulator)" in out.stdout and "yes (180 of 182" in out.stdout
    trt = emulator_process("--engine", "trtllm")
    out = swarm("probe", trt.url, "--json")  # type: ignore[attr-defined]
    assert '"engine": "trtllm"' in out.stdout and '"second_cached_tokens": 160' in out.stdout
    vl = emulator_process("--engine", "vllm")
    result = json.loads(swarm("probe", vl.url, "--json").stdout)  # type: ignore[attr-defined]
    assert (result["engine"], result["emulator"], result["block_tokens"]) == ("vllm", True, 128)
    assert result["second_cached_tokens"] == 128  # 182 prompt tokens: one whole 128-token block


def test_probe_advises_when_cached_tokens_are_not_reported(emulator_process: Callable[..., object]) -> None:
    sg = emulator_process("--engine", "sglang", "--no-cache-report")
    out = swarm("probe", sg.url, "--json")  # type: ignore[attr-defined]
    assert out.returncode == 0, out.stderr
    assert '"cache_reported": false' in out.stdout
    out = swarm("probe", sg.url)  # type: ignore[attr-defined]
    assert "advice: cached tokens are not reported: start SGLang with --enable-cache-report" in " ".join(
        out.stdout.split()
    )
