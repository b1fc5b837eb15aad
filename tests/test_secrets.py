"""A planted API key never reaches anything a run writes.

The emulator answers 30 % of requests with a 500 whose error text echoes the request's
Authorization header (as some proxies do), so the key comes back to the client in error
texts; it must be redacted there, in the trace, the manifest, the logs, the terminal output
and Ray's session logs. The trace's error texts show the redaction happened (so the key was
really sent).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarm.clients.redact import REDACTED, redact, register_secret
from swarm.trace.reader import read_requests

KEY = "sk-planted-" + "7f3a9c" * 5

PROFILE = """\
name: tiny
system_prompt: {style: prose, tokens: 60}
task_tokens: {dist: constant, value: 10}
instruction_tokens: {dist: constant, value: 5}
output_tokens: {default: {dist: constant, value: 4}}
think_time_s: {dist: constant, value: 0}
"""


def _files_containing(root: Path, needle: bytes, since: float) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        try:
            if (
                path.is_file()
                and not path.is_symlink()
                and path.stat().st_mtime >= since
                and needle in path.read_bytes()
            ):
                hits.append(str(path))
        except OSError:
            continue
    return hits


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["ray", "inprocess"])
def test_planted_api_key_is_in_no_file_a_run_writes(
    emulator_process: object, tmp_path: Path, executor: str
) -> None:
    emu = emulator_process("--timing", "zero", "--faults", "http_500=0.3,seed=5")  # type: ignore[operator]
    (tmp_path / "tiny.yaml").write_text(PROFILE)
    out = tmp_path / "runs"
    key_args = ["--api-key-env", "SWARM_PLANTED_KEY"]
    env = {**os.environ, "SWARM_PLANTED_KEY": KEY, "RAY_AUTH_MODE": "disabled"}
    if executor == "inprocess":  # the other way to give a key: a file
        (tmp_path / "key.txt").write_text(KEY + "\n")
        key_args = ["--api-key-file", str(tmp_path / "key.txt")]
        env.pop("SWARM_PLANTED_KEY")
    started = time.time() - 1
    proc = subprocess.run(
        [
            sys.executable, "-m", "swarm", "run", "--executor", executor, "--workers", "1",
            "--target", f"emu={emu.url}", "--engine", "sglang", *key_args,
            "--profile", str(tmp_path / "tiny.yaml"), "--topology", "chain", "--agents", "12",
            "--record-text", "--output", str(out), "--no-progress", "--retries", "1", "--retry-backoff", "0",
        ],
        capture_output=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    needle = KEY.encode()
    assert needle not in proc.stdout and needle not in proc.stderr
    (run_dir,) = list(out.iterdir())
    assert _files_containing(run_dir, needle, 0) == []
    assert _files_containing(tmp_path, needle, 0) == [str(tmp_path / "key.txt")] * (executor == "inprocess")
    ray_root = Path(tempfile_root()) / "ray"
    if executor == "ray" and ray_root.exists():
        assert _files_containing(ray_root, needle, started) == []
    errors = [e for e in read_requests(run_dir)["error"].to_pylist() if e]
    assert errors and all(f"(Authorization: Bearer {REDACTED})" in e for e in errors)


def tempfile_root() -> str:
    import tempfile

    return tempfile.gettempdir()


def test_log_records_are_redacted_once_a_key_is_registered(caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-live-" + "x1y2z3" * 4
    register_secret(secret)
    log = logging.getLogger("swarm.test.secrets")
    with caplog.at_level(logging.INFO):
        log.info("header was %s", f"Bearer {secret}")
        try:
            raise RuntimeError(f"server said {secret}")
        except RuntimeError:
            log.exception("failed")
    text = caplog.text
    assert secret not in text
    assert text.count(REDACTED) == 2  # the message, and the exception in the traceback
    assert redact(f"a {secret} b {secret}") == f"a {REDACTED} b {REDACTED}"


def test_a_key_is_never_taken_from_a_flag_value() -> None:
    from typer.testing import CliRunner

    from swarm.cli import app

    result = CliRunner().invoke(app, ["run", "--api-key", KEY])
    assert result.exit_code != 0 and "No such option" in result.output


def test_the_emulator_binds_loopback_unless_told_otherwise(emulator: object) -> None:
    from swarm.emulator.config import EmulatorConfig

    assert EmulatorConfig().host == "127.0.0.1"
    emu = emulator(timing="zero")  # type: ignore[operator]
    assert emu.url.startswith("http://127.0.0.1:")


def test_spec_files_are_parsed_with_the_safe_loader_only(tmp_path: Path) -> None:
    from swarm.errors import InputError
    from swarm.workload.specfiles import load_yaml

    marker = tmp_path / "pwned"
    spec = tmp_path / "evil.yaml"
    spec.write_text(f"workload: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(InputError, match=r"evil.yaml: invalid YAML"):
        load_yaml(spec)
    assert not marker.exists()


def test_paths_in_a_spec_cannot_leave_its_folder(tmp_path: Path) -> None:
    from swarm.errors import InputError
    from swarm.workload.agent_profile import load_profile

    (tmp_path / "secret.txt").write_text("not for you")
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "sneaky.yaml").write_text("name: sneaky\nsystem_prompt: {file: ../secret.txt}\n")
    with pytest.raises(
        InputError, match=r"sneaky.yaml: system_prompt.file: path '../secret.txt' leaves the spec's folder"
    ):
        load_profile(folder / "sneaky.yaml")
    (folder / "plain.yaml").write_text(f"name: plain\nsystem_prompt: {{file: {tmp_path / 'secret.txt'}}}\n")
    assert load_profile(folder / "plain.yaml").system_prompt_text == "not for you"  # absolute: allowed
