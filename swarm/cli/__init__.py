"""The ``swarm`` command line: each command builds a spec and calls the library.

Place in the map (docs/architecture.md, "CLI"): one module per command (``emulate``, ``probe``,
``run`` with ``topologies``, ``replay``, ``export``, ``report`` with ``compare``), all registered
on one typer app (``app``), and ``live`` for the live view. Heavy modules (aiohttp, pyarrow,
ray) are imported inside the commands, so ``swarm --help`` answers at once. Bad input (an
``InputError``) is printed as one line on stderr with exit code 2 and no traceback.
"""

from __future__ import annotations

import sys

from swarm.cli import calibrate, emulate, export, probe, replay, report, run, shape, simulate, sweep  # noqa: F401 - they register commands
from swarm.cli.app import app
from swarm.errors import InputError

__all__ = ["app", "main"]


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _interrupt_behind(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt led to ``exc`` (typer turns one into a quiet exit 130)."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def main() -> None:
    """Console entry point: runs the app, turning bad input into one line and exit code 2.

    SIGTERM ends a command as Ctrl-C does, at any stage (parts that stop gracefully install
    their own handler for as long as they run); either says so on stderr and exits 130."""
    import signal

    signal.signal(signal.SIGTERM, _terminate)
    try:
        app()
    except InputError as exc:
        print(f"swarm: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("swarm: interrupted", file=sys.stderr)
        sys.exit(130)
    except SystemExit as exc:
        if exc.code == 130 and _interrupt_behind(exc):
            print("swarm: interrupted", file=sys.stderr)
        raise


if __name__ == "__main__":
    main()
