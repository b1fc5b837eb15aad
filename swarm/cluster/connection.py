"""Starting or joining Ray, with a deadline, so a run never hangs before it starts.

Place in the map (docs/architecture.md, "Ray"): used by the RayExecutor when a run begins and ends.

Which Ray: ``--address`` when given, else ``RAY_ADDRESS``, else a new local Ray. Ray's own
default for "no address" is to join the cluster named in its address file
(``/tmp/ray/ray_current_cluster``, left behind by ``ray start``), which may be long dead;
swarm asks for ``local`` instead, so a plain ``swarm run`` always starts its own.

The deadline: ``ray.init`` runs in a thread of its own while the calling thread waits, so the
wait ends at the deadline with an error naming what failed, and a signal (Ctrl-C, SIGTERM
turned into KeyboardInterrupt by the CLI) ends it at once. The thread lives until the
connection is closed: Ray's local processes are tied to the thread that started them (Linux's
parent-death signal), so a thread that ended would take them with it. A ``host:port`` address
is first tried with a plain TCP connect, so a cluster that is gone is named in a second.

With Ray Client (``ray://``), a session whose server process dies as it starts (a known Ray
bug: the client server forks while gRPC threads run) is tried again, up to three times.

A local Ray's workers run at the driver's priority (``RAY_worker_niceness=0``; Ray's default
of 15 starves the generator beside an emulator on the same cores). A cluster's workers run as
that cluster was started.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from swarm.errors import InputError

log = logging.getLogger(__name__)

#: How long starting a local Ray or joining a cluster may take, seconds.
DEFAULT_TIMEOUT_S = 60.0
#: Tries to open a Ray Client session (``ray://``) whose server failed to start one.
CLIENT_ATTEMPTS = 3
#: The tick at which the waiting thread looks up (signals are handled between ticks).
_TICK_S = 0.2


def chosen_address(address: str | None) -> str:
    """The address a run uses: the given one, else ``RAY_ADDRESS``, else ``local``."""
    return address or os.environ.get("RAY_ADDRESS") or "local"


def describe(address: str) -> str:
    return "a new local Ray" if address == "local" else f"the Ray cluster at {address}"


def check_reachable(address: str, timeout_s: float) -> None:
    """For a ``host:port`` (or ``ray://host:port``) address, a TCP connect first: InputError
    naming the address when nothing answers there."""
    if address in ("local", "auto"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout_s, 10.0)):
            return
    except OSError as exc:
        reason = (
            "connection refused"
            if isinstance(exc, ConnectionRefusedError)
            else str(exc) or type(exc).__name__
        )
        raise InputError(
            f"cannot join the Ray cluster at {address}: {reason} (is it running? without --address "
            "and RAY_ADDRESS, swarm starts a local Ray)"
        ) from None


class RayConnection:
    """Ray, started or joined by a thread that stays until ``close``."""

    def __init__(self, address: str | None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.address = chosen_address(address)
        self.timeout_s = timeout_s
        self._ready = threading.Event()
        self._release = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        #: the caller stopped waiting (deadline, signal): a start that completes later is undone
        self._abandoned = False

    def open(self, runtime_env: dict[str, Any]) -> RayConnection:
        """Start or join Ray; InputError when it fails or does not answer by the deadline."""
        check_reachable(self.address, self.timeout_s)
        self._thread = threading.Thread(
            target=self._hold, args=(runtime_env,), name="swarm-ray-connection", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self.timeout_s
        try:
            while not self._ready.wait(_TICK_S):
                if time.monotonic() >= deadline:
                    raise InputError(
                        f"{describe(self.address)} did not answer within {self.timeout_s:g} s"
                        + ("" if self.address == "local" else " (is it running, and is this its address?)")
                        + "; --ray-timeout sets the deadline"
                    )
        except BaseException:  # the deadline, or a signal: let the thread go, and undo a late start
            self._abandoned = True
            self._release.set()
            raise
        if self._error is not None:
            exc = self._error
            raise InputError(f"cannot start or join {describe(self.address)}: {type(exc).__name__}: {exc}")
        return self

    def _hold(self, runtime_env: dict[str, Any]) -> None:
        import ray

        kwargs: dict[str, Any] = {"address": self.address, "logging_level": logging.WARNING}
        if self.address == "local":
            kwargs["include_dashboard"] = False
            # Ray starts its workers at niceness 15: beside an emulator (or any process at 0)
            # on the same cores, the generator would get the leftovers and send late. A local
            # Ray is this run's own, so its workers run at the driver's priority.
            os.environ.setdefault("RAY_worker_niceness", "0")
        if runtime_env:
            kwargs["runtime_env"] = runtime_env
        worker_log = logging.getLogger("ray._private.worker")
        quiet = _DropMainThreadWarning()
        worker_log.addFilter(quiet)  # ours is not the main thread, on purpose (see above)
        try:
            for attempt in range(1, CLIENT_ATTEMPTS + 1):
                try:
                    ray.init(**kwargs)
                    break
                except ConnectionAbortedError as exc:
                    if not (
                        self.address.startswith("ray://")
                        and attempt < CLIENT_ATTEMPTS
                        and not self._abandoned
                    ):
                        raise
                    # Ray Client's server forks one server per client, and that fork can die at
                    # birth (ray-project/ray#63202): a new connection gets a new one
                    log.warning(
                        "the Ray Client server at %s failed to start a session (%s); trying again",
                        self.address,
                        str(exc).strip().splitlines()[0][:200],
                    )
        except BaseException as exc:  # handed to the waiting thread, which raises it
            self._error = exc
            self._ready.set()
            return
        finally:
            worker_log.removeFilter(quiet)
        if self._abandoned:  # nobody waits for this Ray any more: leave no half-held one behind
            ray.shutdown()
            return
        self._ready.set()
        self._release.wait()

    def close(self) -> None:
        """Shut Ray down (for a local one: stop its processes) and let the thread end."""
        import ray

        try:
            if ray.is_initialized():
                ray.shutdown()
        finally:
            self._release.set()
            if self._thread is not None:
                self._thread.join(timeout=30)


class _DropMainThreadWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "not the main thread" not in record.getMessage()
