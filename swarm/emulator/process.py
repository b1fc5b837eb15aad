"""Running ``swarm emulate`` as a child process on loopback (for ``swarm run`` with no target).

Place in the map (docs/architecture.md, "The emulator"): the emulator stays a separate program; this
module only starts it, reads the URL it prints, and stops it. Running it in its own process
also keeps its CPU use off the generator's event loop.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tempfile

from swarm.errors import InputError

log = logging.getLogger(__name__)


def _yield_to_the_generator(pid: int) -> None:
    """Run the emulator under ``SCHED_BATCH``: woken by a request, it no longer preempts the
    generator that sent it. Over loopback the sender's ``send`` wakes the server, and Linux
    tends to wake it on the sender's core and switch to it at once: a send that took 0.02 ms
    took 0.5-1.1 ms (the emulator parsing the request first), and the next call of a fan-out
    went out that much later. A real engine is on other hardware; its stand-in should not
    take the client's core either. A batch task still gets its fair share of the CPU."""
    if not hasattr(os, "sched_setscheduler"):
        return
    try:
        os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))
    except OSError as exc:
        log.debug("emulator %d stays under the default scheduling policy: %s", pid, exc)


class EmulatorProcess:
    """``swarm emulate --port 0 ARGS...``; ``url`` is set once it listens."""

    def __init__(self, args: list[str], startup_timeout_s: float = 60.0) -> None:
        self.args = args
        # stderr goes to a file, not a pipe: nobody reads a pipe while the emulator runs, and a
        # full one would block it
        self._stderr = tempfile.TemporaryFile(mode="w+t")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "swarm", "emulate", "--port", "0", "--exit-with-parent", *args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # a Ctrl-C in the terminal goes to swarm run, which stops us
        )
        _yield_to_the_generator(self.proc.pid)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"listening on (http://\S+)", line)
        if not match:
            self.proc.kill()
            self.proc.wait()
            self._stderr.seek(0)
            err = self._stderr.read()
            self._stderr.close()
            raise InputError(f"the emulator did not start: {(line + err).strip()[:500]}")
        self.url = match.group(1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()

    def __enter__(self) -> EmulatorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
