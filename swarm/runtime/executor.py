"""Executors: where a target run's loop runs. The Executor protocol and the in-process one.

Place in the map (docs/architecture.md, "Runtime"): the run frame hands each target's TargetRun to an
Executor. ``InProcessExecutor`` runs ``loop.drive`` in this process's one event loop, with
SIGINT/SIGTERM as a graceful stop; the Ray executor (``cluster.executor``) deals the source's
sessions over worker actors that each run ``loop.drive`` on their part.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from swarm.runtime.clocks import Placement
from swarm.runtime.context import TargetOutcome, TargetRun
from swarm.runtime.loop import drive, stop_conditions_for

T = TypeVar("T")


class Executor(Protocol):
    """Runs one TargetRun; every record ends up in ``run.sink`` (or, for executors whose
    workers write themselves, under ``run.storage``)."""

    def run_target(self, run: TargetRun) -> TargetOutcome: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...


class InProcessExecutor:
    """All sessions in this process's one event loop. SIGINT/SIGTERM stop the run gracefully."""

    def __enter__(self) -> InProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run_target(self, run: TargetRun) -> TargetOutcome:
        placement = Placement()
        stop = stop_conditions_for(run, placement)
        outcome: TargetOutcome = run_with_signals(lambda: drive(run, placement, stop=stop), stop.interrupt)
        return outcome


def run_with_signals(
    main: Callable[[], Awaitable[T]],
    on_signal: Callable[[], None],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """``asyncio.run`` of ``main()`` where SIGINT/SIGTERM call ``on_signal`` (a graceful stop);
    on a loop ``loop_factory`` makes (a simulation's virtual clock), else asyncio's own."""

    async def runner() -> T:
        loop = asyncio.get_running_loop()
        installed: dict[int, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                previous = signal.getsignal(sig)
                loop.add_signal_handler(sig, on_signal)
                installed[sig] = previous
        try:
            return await main()
        finally:
            # asyncio's removal leaves the default action: put back what was there (the CLI's
            # SIGTERM-as-Ctrl-C), so a signal after this part still ends the run cleanly
            for signum, previous in installed.items():
                loop.remove_signal_handler(signum)
                if previous is not None:
                    signal.signal(signum, previous)

    if loop_factory is None:
        return asyncio.run(runner())
    return _run_on(loop_factory(), runner())


def _run_on(loop: asyncio.AbstractEventLoop, main: Awaitable[T]) -> T:
    """``main`` to its end on ``loop``, then what ``asyncio.run`` does after: the tasks left
    cancelled, async generators closed, the loop closed."""
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
