"""swarm on a real multi-node Ray cluster: a head and four worker nodes on loopback.

The cluster (``swarm.cluster.loopback``) is started once for the module with ``ray start``:
real raylets, each node on its own 127.0.0.x address with a custom resource. ``swarm run``
joins it as a user's driver does (a process of its own, ``--address``, ``RAY_ADDRESS``,
``ray://``). Checked: workers land on every node and the manifest says where; a node lost
mid-run (its raylet killed) leaves the run going on the others with its counts adding up, for
the driver's trace and for ``--worker-writes``; a driver killed with SIGKILL leaves no worker
actor behind; the runtime environment carries swarm's code and nothing of the driver's
environment; stopping the cluster leaves no Ray process.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sending import STEADY_PROFILE

from swarm.cluster.loopback import LoopbackCluster, LoopbackNode
from swarm.emulator.http_server import EmulatorThread
from swarm.trace.manifest import RunManifest, RunStatus
from swarm.trace.reader import read_requests

pytestmark = pytest.mark.slow

CALLS_PER_AGENT = 4  # the chain topology


@pytest.fixture(scope="module")
def cluster() -> Iterator[LoopbackCluster]:
    c = LoopbackCluster(worker_cpus=(1, 1, 1, 1)).start()
    try:
        yield c
    finally:
        left = c.stop()
    assert not left, f"Ray processes left behind: {left}"


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "steady.yaml"
    path.write_text(STEADY_PROFILE)
    return path


def swarm_run(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "swarm", "run", "--no-progress", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout_s: float = 300, logs: Callable[[], str] | None = None) -> str:
    """The run's output once it ended well; its stderr (and the cluster's logs) if not."""
    out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, err[-3000:] + ("\n" + logs() if logs is not None else "")
    return out + err


def run_dir_of(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def wait_for_parts(
    out: Path, proc: subprocess.Popen[str], prefixes: list[str], timeout_s: float = 120
) -> Path:
    """The run folder once a closed part starting with each prefix is there (the run is going)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        runs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
        if runs and (runs[0] / "requests").exists():
            names = [p.name for p in (runs[0] / "requests").glob("*.parquet")]
            if all(any(n.startswith(prefix) for n in names) for prefix in prefixes):
                return runs[0]
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"no closed parts {prefixes} within {timeout_s} s")


def swarm_workers(cluster: LoopbackCluster) -> list[int]:
    """Pids of the cluster's processes that are swarm worker actors."""
    out = []
    for p in cluster.processes():
        try:
            if "SwarmWorker" in " ".join(p.cmdline()):
                out.append(p.pid)
        except Exception:  # gone while we looked
            continue
    return out


def check_counts_add_up(manifest: RunManifest, run_dir: Path) -> None:
    """rows + lost = sent, for the run and for every worker."""
    table = read_requests(run_dir)
    workers = table["worker"].to_pylist()
    assert sum(manifest.counts.values()) == table.num_rows
    assert (
        table.num_rows + manifest.records_lost + manifest.records_lost_with_workers == manifest.requests_sent
    )
    for w in manifest.workers:
        assert workers.count(w.worker) == w.requests, w
        assert w.requests + w.records_lost == w.requests_sent, w


def test_a_run_joins_by_address_places_workers_on_every_node_and_ships_only_its_code(
    cluster: LoopbackCluster, emulator: Callable[..., EmulatorThread], profile: Path, tmp_path: Path
) -> None:
    emu = emulator(engine="sglang", timing="zero")
    nodes = cluster.alive_workers()  # all four, unless a test that loses one ran first
    secret = "sk-planted-7f3a9c1d0e"
    out = tmp_path / "runs"
    proc = swarm_run(
        [
            "--address", cluster.address, "--workers", str(2 * len(nodes)), "--target", f"e={emu.url}", "--api-key-env",
            "SWARM_TEST_KEY", "--profile", str(profile), "--topology", "chain", "--agents", "40",
            "--arrival", "constant:200", "--output", str(out),
        ],
        env={"SWARM_TEST_KEY": secret, "SWARM_DRIVER_ONLY": secret + "-env"},
    )  # fmt: skip
    finish(proc)
    run_dir = run_dir_of(out)
    manifest = RunManifest.read(run_dir)
    assert manifest.status is RunStatus.COMPLETE
    assert manifest.counts == {"ok": 40 * CALLS_PER_AGENT} == {"ok": manifest.requests_sent}
    # two workers on each worker node (one CPU each, half a CPU per worker), none on the head
    placed = [(w.node_id, w.node_ip) for w in manifest.workers]
    assert sorted(placed) == sorted([(n.node_id, n.ip) for n in nodes] * 2)
    assert all(w.host and w.pid and w.alive for w in manifest.workers)
    check_counts_add_up(manifest, run_dir)
    # the runtime environment: swarm's code went to the cluster as a package ...
    session = Path(cluster.temp_dir) / "session_latest"
    shipped = list((session / "runtime_resources").glob("py_modules_files/*"))
    assert shipped, "no py_modules package was unpacked on the cluster"
    # ... and nothing of the driver's environment: the key and the driver's variables are in no
    # file of the cluster (logs, runtime resources, spilled objects)
    for path in Path(cluster.temp_dir).rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                data = path.read_bytes()
            except OSError:
                continue
            assert secret.encode() not in data, f"the driver's secret is in {path}"


def test_ray_address_and_ray_client_join_the_same_cluster(
    cluster: LoopbackCluster, emulator: Callable[..., EmulatorThread], profile: Path, tmp_path: Path
) -> None:
    emu = emulator(engine="sglang", timing="zero")
    out = tmp_path / "runs"
    proc = swarm_run(
        ["--workers", "2", "--target", f"e={emu.url}", "--profile", str(profile), "--topology", "chain",
         "--agents", "10", "--arrival", "constant:100", "--output", str(out)],
        env={"RAY_ADDRESS": cluster.client_address},
    )  # fmt: skip
    finish(proc, logs=lambda: cluster.log_tail("ray_client_server*"))
    manifest = RunManifest.read(run_dir_of(out))
    assert manifest.status is RunStatus.COMPLETE and manifest.counts == {"ok": 10 * CALLS_PER_AGENT}
    workers = {n.node_id for n in cluster.nodes if n.name.startswith("w")}
    assert (
        len({w.node_id for w in manifest.workers}) == 2 and {w.node_id for w in manifest.workers} <= workers
    )


def test_a_driver_killed_with_sigkill_leaves_no_worker_holding_the_cluster(
    cluster: LoopbackCluster, emulator: Callable[..., EmulatorThread], profile: Path, tmp_path: Path
) -> None:
    emu = emulator(engine="sglang", timing="zero")
    out = tmp_path / "runs"
    common = ["--address", cluster.address, "--target", f"e={emu.url}", "--profile", str(profile),
              "--topology", "chain", "--flush-interval", "0.5"]  # fmt: skip
    proc = swarm_run([*common, "--workers", "4", "--agents", "100000", "--arrival", "constant:40",
                      "--output", str(out)])  # fmt: skip
    try:
        wait_for_parts(out, proc, ["part-e-"])
        assert len(swarm_workers(cluster)) == 4
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    # the cluster ends the dead driver's job, and its actors with it
    deadline = time.monotonic() + 90
    while swarm_workers(cluster) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not swarm_workers(cluster), "worker actors outlived their driver"
    # and the whole cluster is free for the next run
    again = tmp_path / "again"
    finish(swarm_run([*common, "--workers", "4", "--agents", "8", "--arrival", "constant:100",
                      "--output", str(again)]))  # fmt: skip
    manifest = RunManifest.read(run_dir_of(again))
    assert manifest.status is RunStatus.COMPLETE and len(manifest.workers) == 4


def lost_node_run(
    cluster: LoopbackCluster, emu_url: str, profile: Path, out: Path, node: str, extra: list[str]
) -> tuple[RunManifest, Path, int]:
    """A run over four workers, one per worker node; ``node``'s raylet killed once every
    worker has closed a part. Returns the manifest, the run folder and the kill time (ns)."""
    proc = swarm_run(
        ["--address", cluster.address, "--workers", "4", "--target", f"e={emu_url}", "--profile", str(profile),
         "--topology", "chain", "--agents", "48", "--arrival", "constant:4", "--flush-interval", "0.5", "--seed", "1",
         "--output", str(out), *extra],
    )  # fmt: skip
    try:
        prefixes = ["part-e-w0", "part-e-w1", "part-e-w2", "part-e-w3"] if extra else ["part-e-"]
        run_dir = wait_for_parts(out, proc, prefixes)
        killed_ns = time.time_ns()
        cluster.kill_raylet(node)
        text = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "lost" in text
    return RunManifest.read(run_dir), run_dir, killed_ns


def check_lost_node(
    manifest: RunManifest, run_dir: Path, node: LoopbackNode, killed_ns: int, worker_writes: bool = False
) -> None:
    assert manifest.status is RunStatus.COMPLETE, manifest.status_reason
    (lost,) = [w for w in manifest.workers if not w.alive]
    assert lost.node_id == node.node_id and lost.node_ip == node.ip
    assert "died" in (manifest.status_reason or "") and node.ip in (manifest.status_reason or "")
    # when: after the kill; its last hand-over shortly before it
    assert lost.lost_at is not None and lost.last_drain_at is not None
    lost_ns = dt.datetime.fromisoformat(lost.lost_at).timestamp() * 1e9
    drained_ns = dt.datetime.fromisoformat(lost.last_drain_at).timestamp() * 1e9
    assert drained_ns <= lost_ns and lost_ns >= killed_ns
    assert drained_ns >= killed_ns - 10e9
    # the sessions it cut are named: its own, and as many as it counts
    table = read_requests(run_dir)
    assert lost.sessions_cut == len(lost.sessions_cut_ids) > 0
    assert manifest.targets[0].sessions_lost == lost.sessions_cut
    assert set(lost.sessions_cut_ids) <= {f"1-{i}" for i in range(lost.worker, 48, 4)}
    # the others ran every one of their sessions to the end
    for w in manifest.workers:
        if w.alive:
            assert w.sessions_cut == 0 and w.requests == w.sessions * CALLS_PER_AGENT, w
    assert manifest.records_lost_with_workers == lost.records_lost
    check_counts_add_up(manifest, run_dir)
    # its rows are of its own sessions; when it handed its records to the driver, nothing of a
    # session that ran to its end is missing (with --worker-writes, rows of its unclosed part
    # are lost whatever their session: counted in records_lost)
    own = {f"1-{i}" for i in range(lost.worker, 48, 4)}
    rows = [
        s
        for s, w in zip(table["session_id"].to_pylist(), table["worker"].to_pylist(), strict=True)
        if w == lost.worker
    ]
    assert set(rows) <= own
    if not worker_writes:
        for session in own - set(lost.sessions_cut_ids):
            assert rows.count(session) == CALLS_PER_AGENT, session
    # the report says which node was lost and when
    report = subprocess.run(
        [sys.executable, "-m", "swarm", "report", str(run_dir)], capture_output=True, text=True, timeout=120
    )
    assert report.returncode == 0, report.stderr
    said = " ".join(report.stdout.split())
    assert f"worker {lost.worker} on node {node.ip}" in said and lost.lost_at in said, said[-3000:]


def test_a_node_lost_mid_run_leaves_the_run_going_on_the_others(
    cluster: LoopbackCluster, emulator: Callable[..., EmulatorThread], profile: Path, tmp_path: Path
) -> None:
    emu = emulator(engine="sglang", timing="fixed", first_token_ms=20, token_ms=10)
    manifest, run_dir, killed_ns = lost_node_run(cluster, emu.url, profile, tmp_path / "runs", "w3", [])
    check_lost_node(manifest, run_dir, cluster.node("w3"), killed_ns)


def test_a_node_lost_mid_run_with_worker_writes_keeps_its_closed_parts(
    cluster: LoopbackCluster, emulator: Callable[..., EmulatorThread], profile: Path, tmp_path: Path
) -> None:
    # w3 is gone after the test above (its workers now go to w1, w2 and w4); w4 is lost here
    emu = emulator(engine="sglang", timing="fixed", first_token_ms=20, token_ms=10)
    manifest, run_dir, killed_ns = lost_node_run(
        cluster, emu.url, profile, tmp_path / "runs", "w4", ["--worker-writes"]
    )
    check_lost_node(manifest, run_dir, cluster.node("w4"), killed_ns, worker_writes=True)
    (lost,) = [w for w in manifest.workers if not w.alive]
    # every part it closed reads on its own, and its rows are the trace's rows of that worker
    # (check_counts_add_up: as many as the manifest says it handed over)
    parts = sorted((run_dir / "requests").glob(f"part-e-w{lost.worker}-*.parquet"))
    assert parts, "the lost worker closed no part"
    for part in parts:
        assert pq.read_table(part).num_rows > 0, part
    assert set(pq.read_table(parts[0])["worker"].to_pylist()) == {lost.worker}
