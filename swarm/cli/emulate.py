"""``swarm emulate``: the built-in engine emulator as a server.

Place in the map (docs/architecture.md, "CLI"): thin over ``EmulatorConfig`` (every flag and
default is a field of it, ``cli/flags.py``), then ``swarm.emulator``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from swarm.cli.app import app
from swarm.cli.flags import Given, takes
from swarm.cli.twins import emulator_config

if TYPE_CHECKING:
    from swarm.emulator.config import EmulatorConfig


@app.command()
@takes("emulate")
def emulate(
    exit_with_parent: Annotated[
        bool,
        typer.Option(
            "--exit-with-parent",
            hidden=True,
            help="stop when the process that started this one is gone (swarm run's embedded emulators)",
        ),
    ] = False,
    *,
    given: Given,
) -> None:
    """Serve an emulated engine (SGLang, TensorRT-LLM or vLLM API) on loopback until Ctrl-C."""
    config = emulator_config(given)
    replicas = int(given.get("replicas") or 1)
    if replicas > 1:
        serve_fleet(config, replicas)
    else:
        serve(config, exit_with_parent)


#: printed under a fleet's URLs: SGLang's router in front of them (sglang-router on PyPI)
ROUTER_HINT = "python -m sglang_router.launch_router --host 127.0.0.1 --port 30000 --policy cache_aware --worker-urls"


def serve_fleet(config: EmulatorConfig, count: int) -> None:
    """``count`` replicas of ``config``, one process each, until SIGINT/SIGTERM; their URLs
    printed one per line once all listen, then a router's command line for them."""
    import signal

    from swarm.emulator.replicas import EmulatorFleet

    stop: list[bool] = []
    for sig in (signal.SIGINT, signal.SIGTERM):  # before the replicas start: a stop while they do waits for them
        signal.signal(sig, lambda *_: stop.append(True))
    fleet = EmulatorFleet(config, count)
    try:
        for i, url in enumerate(fleet.urls):
            print(f"swarm emulator replica {i} ({config.engine} profile, {config.timing} timing) listening on {url}")
        print(f"a router in front of them: {ROUTER_HINT} {' '.join(fleet.urls)}", flush=True)
        fleet.wait(lambda: bool(stop))
    finally:
        fleet.stop()


def serve(config: EmulatorConfig, exit_with_parent: bool) -> None:
    """Serve ``config`` until SIGINT/SIGTERM, or until the parent process is gone."""
    from swarm.emulator.http_server import RunningEmulator, serve_until_stopped

    def ready(server: RunningEmulator) -> None:
        injected = " with injected faults" if config.faults is not None and config.faults.active else ""
        print(
            f"swarm emulator ({config.engine} profile, {config.timing} timing{injected}) listening on {server.url}",
            flush=True,
        )

    serve_until_stopped(config, ready, exit_with_parent)
