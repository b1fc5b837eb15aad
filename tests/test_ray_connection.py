"""Which Ray a run uses, and that starting or joining it can neither hang nor ignore a signal.

Each case runs ``swarm run`` in a process of its own with its own Ray temp folder
(``RAY_TMPDIR``), so the address file it finds (or leaves) is the test's, not the machine's.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def ray_tmpdir() -> Iterator[Path]:
    # short: Ray's socket paths live under it, and a Unix socket path has a length limit
    path = Path(tempfile.mkdtemp(prefix="swr", dir="/tmp"))
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def _env(ray_tmpdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(ray_tmpdir), RAY_AUTH_MODE="disabled")
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _swarm(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "swarm", "run", "--agents", "2", "--topology", "chain", "--arrival", "all",
         "--no-progress", *args],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_a_plain_run_starts_its_own_ray_whatever_address_file_is_left(
    tmp_path: Path, ray_tmpdir: Path
) -> None:
    # what `ray start --head` leaves behind once its processes were killed: an address file
    # naming a cluster that is gone
    (ray_tmpdir / "ray").mkdir()
    (ray_tmpdir / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{_free_port()}")
    proc = _swarm(["--workers", "1", "--json"], tmp_path, _env(ray_tmpdir))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out)
    assert result["status"] == "complete"
    assert all(t["requests"] == 2 * 4 and t["errors"] == 0 for t in result["targets"].values())


def test_joining_a_dead_address_fails_at_once_and_names_it(tmp_path: Path, ray_tmpdir: Path) -> None:
    port = _free_port()
    proc = _swarm(["--address", f"127.0.0.1:{port}"], tmp_path, _env(ray_tmpdir))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert f"cannot join the Ray cluster at 127.0.0.1:{port}: connection refused" in err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_a_cluster_that_never_answers_ends_at_the_deadline(tmp_path: Path, ray_tmpdir: Path) -> None:
    with socket.socket() as silent:  # accepts connections (the kernel does) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        proc = _swarm(["--address", address, "--ray-timeout", "3"], tmp_path, _env(ray_tmpdir))
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    # swarm's deadline comes first (Ray's own gives up after a minute); either way the run ends
    # with one line naming the cluster, not a hang
    assert f"the Ray cluster at {address} did not answer within 3 s" in err or (
        f"cannot start or join the Ray cluster at {address}" in err
    ), err
    assert "Traceback" not in err


def test_sigterm_ends_a_run_waiting_for_ray(tmp_path: Path, ray_tmpdir: Path) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        proc = _swarm(["--address", address, "--ray-timeout", "600"], tmp_path, _env(ray_tmpdir))
        try:
            # swarm's reachability check connects first; right after it, the run waits for Ray
            connections = []
            deadline = time.monotonic() + 120
            while not connections and time.monotonic() < deadline and proc.poll() is None:
                if select.select([silent], [], [], 0.5)[0]:
                    connections.append(silent.accept()[0])
            assert connections, proc.communicate(timeout=10)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
            for c in connections:
                c.close()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err


def _listening() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def test_a_ray_client_session_whose_server_dies_at_birth_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray Client's server can lose the process it forks for a new session (a Ray bug): the
    connection asks for a new session, up to three times in all, and then says what failed."""
    import ray

    from swarm.cluster.connection import RayConnection
    from swarm.errors import InputError

    calls: list[str] = []

    def init_failing(times: int) -> object:
        def init(**kwargs: object) -> None:
            calls.append(str(kwargs["address"]))
            if len(calls) <= times:
                raise ConnectionAbortedError(
                    "Initialization failure from server:\nStarting Ray client server failed."
                )

        return init

    with _listening() as server:
        address = f"ray://127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setattr(ray, "init", init_failing(2))
        monkeypatch.setattr(ray, "is_initialized", lambda: False)
        RayConnection(address, timeout_s=30).open({}).close()
        assert calls == [address] * 3
        calls.clear()
        monkeypatch.setattr(ray, "init", init_failing(3))
        with pytest.raises(InputError, match="Initialization failure from server"):
            RayConnection(address, timeout_s=30).open({})
        assert len(calls) == 3
        # a plain address is not tried again: only Ray Client sessions die this way
        calls.clear()
        plain = f"127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(InputError):
            RayConnection(plain, timeout_s=30).open({})
        assert calls == [plain]
