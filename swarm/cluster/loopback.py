"""LoopbackCluster: a real multi-node Ray cluster on one machine, for tests and benchmarks.

Place in the map (docs/architecture.md, "Ray"): used by the multi-node tests and by
``python -m bench cluster``; a user can start one to try ``--address`` before a real cluster.

Every node is started with ``ray start --block`` as a process group of its own (its GCS or
raylet, agents and, later, its worker processes), each on its own loopback address: the head
on 127.0.0.2, worker node k on 127.0.0.(2+k). Ray turns ``127.0.0.1`` given as a node address
into the host's network address; other loopback addresses it keeps, so all of Ray's traffic
stays on this host. Each node carries a custom resource ``swarm_node_<name>`` so a test can
tell where an actor landed, and its raylet's pid is known, so a node can be lost on purpose
(``kill_raylet``). ``stop`` kills every process group it started and everything below them,
and returns what it could not kill: nothing is left behind.

Ports: the head's GCS, client server and dashboard ports are taken free from the OS; Ray's
worker ports are Ray's defaults. The temporary folder is short (Unix socket paths are limited
to 107 bytes) and removed by ``stop``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from swarm.errors import InputError

log = logging.getLogger(__name__)

READY_MARK = "Ray runtime started"


@dataclass
class LoopbackNode:
    """One node of the cluster: ``head`` or ``w1``, ``w2``, ..."""

    name: str
    ip: str
    cpus: float
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    node_id: str = ""
    raylet_pid: int = 0

    @property
    def resource(self) -> str:
        """The custom resource only this node has (one unit)."""
        return f"swarm_node_{self.name}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_command() -> list[str]:
    """``ray`` of this interpreter (the one swarm runs in)."""
    return [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]


@dataclass
class LoopbackCluster:
    """A head (no CPUs for tasks by default) and one worker node per entry of ``worker_cpus``."""

    worker_cpus: Sequence[float] = (1.0, 1.0)
    head_cpus: float = 0.0
    #: extra environment for every node's processes (e.g. Ray's health-check settings)
    env: dict[str, str] = field(default_factory=dict)
    nodes: list[LoopbackNode] = field(default_factory=list)
    port: int = 0
    client_port: int = 0
    temp_dir: str = ""

    @property
    def address(self) -> str:
        """What ``swarm run --address`` takes to join the cluster."""
        return f"127.0.0.1:{self.port}"

    @property
    def client_address(self) -> str:
        """The Ray Client address (``ray://``)."""
        return f"ray://127.0.0.1:{self.client_port}"

    def node(self, name: str) -> LoopbackNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def __enter__(self) -> LoopbackCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 180.0) -> LoopbackCluster:
        """Start the head, then the worker nodes one by one; InputError naming the node whose
        start failed, with the end of its log."""
        self.temp_dir = tempfile.mkdtemp(prefix="swr", dir="/tmp")
        self.port, self.client_port = free_port(), free_port()
        head = LoopbackNode("head", "127.0.0.2", self.head_cpus)
        workers = [LoopbackNode(f"w{k}", f"127.0.0.{2 + k}", c) for k, c in enumerate(self.worker_cpus, 1)]
        self.nodes = [head, *workers]
        try:
            self._launch(
                head,
                [
                    "--head", f"--port={self.port}", f"--ray-client-server-port={self.client_port}",
                    f"--dashboard-port={free_port()}", "--include-dashboard=false", f"--temp-dir={self.temp_dir}",
                ],
            )  # fmt: skip
            self._wait_ready([head], timeout_s)
            for w in workers:  # one at a time: nodes of one host number their sockets in turn
                self._launch(w, [f"--address={self.address}"])
                self._wait_ready([w], timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, node: LoopbackNode, args: list[str]) -> None:
        node.log_path = Path(self.temp_dir) / f"{node.name}.log"
        resources = json.dumps({node.resource: 1})
        command = [
            *ray_command(), "start", "--block", f"--node-ip-address={node.ip}", f"--num-cpus={node.cpus:g}",
            f"--resources={resources}", "--disable-usage-stats",
            f"--dashboard-agent-listen-port={free_port()}", *args,
        ]  # fmt: skip
        env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"), **self.env}
        with open(node.log_path, "wb") as out:
            node.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
            )  # fmt: skip

    def _wait_ready(self, nodes: list[LoopbackNode], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = list(nodes)
        while waiting:
            for node in list(waiting):
                assert node.process is not None and node.log_path is not None
                text = node.log_path.read_text(errors="replace")
                if node.process.poll() is not None:
                    raise InputError(
                        f"ray start of node {node.name} ({node.ip}) exited with {node.process.returncode}: "
                        + text[-1500:]
                    )
                if READY_MARK in text and self._find_raylet(node):
                    waiting.remove(node)
            if waiting and time.monotonic() > deadline:
                names = ", ".join(n.name for n in waiting)
                raise InputError(f"loopback Ray nodes {names} did not start within {timeout_s:g} s")
            if waiting:
                time.sleep(0.2)

    def _find_raylet(self, node: LoopbackNode) -> bool:
        for p in self._group_processes(node):
            try:
                if p.name() != "raylet":
                    continue
                args = p.cmdline()
            except psutil.Error:
                continue
            for a in args:
                if a.startswith("--node_id="):
                    node.node_id = a.split("=", 1)[1]
                    node.raylet_pid = p.pid
                    return True
        return False

    def _group_processes(self, node: LoopbackNode) -> list[psutil.Process]:
        """The node's process group and every descendant of it (in any group)."""
        if node.process is None:
            return []
        pgid = node.process.pid
        found: dict[int, psutil.Process] = {}
        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) == pgid:
                    found[p.pid] = p
            except (OSError, psutil.Error):
                continue
        for p in list(found.values()):
            try:
                for child in p.children(recursive=True):
                    found[child.pid] = child
            except psutil.Error:
                continue
        return list(found.values())

    def processes(self) -> list[psutil.Process]:
        """Every process of the cluster still running: its nodes' process groups, everything
        below them, and anything else naming its temporary folder."""
        found: dict[int, psutil.Process] = {}
        for node in self.nodes:
            found.update((p.pid, p) for p in self._group_processes(node))
        if self.temp_dir:
            for p in psutil.process_iter():
                try:
                    if any(self.temp_dir in a for a in p.cmdline()):
                        found[p.pid] = p
                except psutil.Error:
                    continue
        return [p for p in found.values() if _running(p)]

    def log_tail(self, pattern: str = "*", chars: int = 2000) -> str:
        """The ends of the cluster's log files matching ``pattern`` (for a failure's message)."""
        logs = Path(self.temp_dir) / "session_latest" / "logs"
        out = []
        for path in sorted(logs.glob(pattern)):
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if text.strip():
                out.append(f"--- {path.name}\n{text[-chars:]}")
        return "\n".join(out)

    def alive_workers(self) -> list[LoopbackNode]:
        """The worker nodes whose raylet still runs."""
        return [
            n for n in self.nodes if n.name != "head" and n.raylet_pid and psutil.pid_exists(n.raylet_pid)
        ]

    def kill_raylet(self, name: str) -> int:
        """SIGKILL node ``name``'s raylet (a node lost); returns its pid."""
        node = self.node(name)
        os.kill(node.raylet_pid, signal.SIGKILL)
        log.info("killed the raylet of node %s (pid %d)", name, node.raylet_pid)
        return node.raylet_pid

    def stop(self, timeout_s: float = 30.0) -> list[int]:
        """Kill every process the cluster started; the pids still running after ``timeout_s``
        (an empty list: nothing left behind). The temporary folder is removed."""
        doomed: dict[int, psutil.Process] = {p.pid: p for p in self.processes()}
        for node in self.nodes:
            if node.process is not None:
                try:
                    os.killpg(node.process.pid, signal.SIGKILL)
                except OSError:
                    pass
        for p in doomed.values():
            try:
                p.kill()
            except psutil.Error:
                pass
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    pass
        _, alive = psutil.wait_procs(list(doomed.values()), timeout=timeout_s)
        left = sorted({p.pid for p in alive if _running(p)} | {p.pid for p in self.processes()})
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        return left

    def describe(self) -> list[dict[str, Any]]:
        return [
            {"name": n.name, "ip": n.ip, "cpus": n.cpus, "node_id": n.node_id, "raylet_pid": n.raylet_pid}
            for n in self.nodes
        ]


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
