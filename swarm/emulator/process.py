"""Running ``swarm emulate`` as a child process on loopback (for ``swarm run`` with no target).

Place in the map (docs/architecture.md, "The emulator"): the emulator stays a separate program; this
module only starts it, reads the URL it prints, and stops it. Running it in its own process
also keeps its CPU use off the generator's event loop.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from swarm.errors import InputError


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
