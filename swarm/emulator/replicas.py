"""A fleet of emulator replicas on one machine: ``swarm emulate --replicas N``, one process each.

Place in the map (docs/architecture.md, "The emulator"): each replica is the same emulator
(``http_server.serve_forever``) with its own port, cache and scheduler, in a process of its own
(spawned, so no replica shares an interpreter or a core's event loop with another). Ports: the
configured one and the N-1 after it, or each a free one with ``--port 0``. Each replica names
itself by its URL (``X-Swarm-Replica``) unless ``--replica-name`` is given, which gets ``-<i>``
appended. A replica stops when the parent is gone; the parent stops them all on its way out.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.process
import queue
from collections.abc import Callable

from swarm.emulator.config import EmulatorConfig
from swarm.errors import InputError

log = logging.getLogger(__name__)

#: seconds a replica has to start listening
STARTUP_TIMEOUT_S = 60.0


def replica_configs(config: EmulatorConfig, count: int) -> list[EmulatorConfig]:
    """The ``count`` replicas' settings: ports from ``config``'s on (each free with 0), names
    ``<replica_name>-<i>`` where a name is given."""
    if count < 1:
        raise InputError(f"--replicas {count}: a fleet has at least one replica")
    base = config.listen_port
    if base and base + count - 1 > 65535:
        raise InputError(f"--replicas {count} from port {base}: the ports run past 65535")
    return [
        config.model_copy(
            update={
                "port": base + i if base else 0,
                "replica_name": f"{config.replica_name}-{i}" if config.replica_name else None,
            }
        )
        for i in range(count)
    ]


def _serve_replica(config: EmulatorConfig, urls: multiprocessing.Queue[str]) -> None:  # pragma: no cover - a child
    from swarm.emulator.http_server import serve_until_stopped

    try:
        serve_until_stopped(config, lambda server: urls.put(server.url), exit_with_parent=True)
    except Exception as exc:  # the parent is waiting for a URL: it gets the cause instead, and stops
        urls.put(f"error: {exc}" if isinstance(exc, InputError) else f"error: {type(exc).__name__}: {exc}")
        raise


class EmulatorFleet:
    """``count`` replicas of ``config``, each its own process; ``urls`` once all listen, in
    the order the replicas were configured (port order)."""

    def __init__(self, config: EmulatorConfig, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._urls: multiprocessing.Queue[str] = context.Queue()
        self.procs: list[multiprocessing.process.BaseProcess] = []
        self.urls: list[str] = []
        try:
            for replica in replica_configs(config, count):
                proc = context.Process(target=_serve_replica, args=(replica, self._urls), daemon=False)
                proc.start()
                self.procs.append(proc)
            self._collect(count)
            self.urls.sort(key=lambda u: int(u.rsplit(":", 1)[1]))
        except BaseException:
            self.stop()
            raise

    def _collect(self, count: int) -> None:
        """Each replica's URL as it starts listening; InputError with the cause when one fails,
        exits or takes longer than ``STARTUP_TIMEOUT_S``."""
        import time

        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while len(self.urls) < count:
            try:
                said = self._urls.get(timeout=0.2)
            except queue.Empty:
                dead = [p for p in self.procs if p.exitcode is not None]
                if dead:
                    raise InputError(f"a replica exited with code {dead[0].exitcode} before it listened") from None
                if time.monotonic() > deadline:
                    raise InputError(f"a replica did not start within {STARTUP_TIMEOUT_S:.0f} s") from None
                continue
            if said.startswith("error: "):
                raise InputError(f"a replica did not start: {said[7:]}")
            self.urls.append(said)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self._urls.close()
        self._urls.join_thread()

    def wait(self, stopping: Callable[[], bool]) -> None:
        """Until ``stopping()`` or every replica has ended."""
        import time

        while not stopping() and any(p.is_alive() for p in self.procs):
            time.sleep(0.2)
