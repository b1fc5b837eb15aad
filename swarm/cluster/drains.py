"""The driver's account of its workers: drains, lost workers, and what each one cost.

Place in the map (docs/architecture.md, "Ray"): used by the RayExecutor while a target runs.

``WorkerAccount`` is one worker as the driver knows it: where it runs, the stats and records
it last handed over, the sessions it finished, and, when it is lost, when and what went with
it. ``Drains`` takes every worker's records each tick without ever blocking on one worker: a
drain call that has not answered stays outstanding and is collected on a later tick, so a
worker on a node that is going down cannot stall the others or the live view.

Accounting, per worker: ``sent`` is the ``requests_sent`` counter of its last stats (every
sent request ends in exactly one record), ``rows`` the records that reached the trace (handed
to the driver, or in its closed parts with ``--worker-writes``), and ``lost = sent - rows``:
for a live worker 0 once its last drain is in; for a lost one, the requests that were in
flight or not yet handed over when it was last heard from. Requests it sent after its last
drain are not known to the driver: the loss is counted from the last drain, which is at most
one drain interval (0.5 s) old when the worker is lost.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from swarm.runtime.live_stats import RunStats
from swarm.runtime.stop import StopConditions
from swarm.trace.sink import TraceSink, TraceWriteError

log = logging.getLogger(__name__)

#: How long the final drains may take, seconds (a worker that does not answer is left out).
FINAL_DRAIN_S = 60.0
#: A drain outstanding this long is warned about once.
SLOW_DRAIN_S = 30.0


def iso_utc(wall_ns: int) -> str:
    return dt.datetime.fromtimestamp(wall_ns / 1e9, dt.timezone.utc).isoformat()


@dataclass
class WorkerAccount:
    """One worker as the driver knows it."""

    index: int
    actor: Any
    #: the manifest's WorkerInfo fields
    info: dict[str, Any]
    session_ids: list[str]
    alive: bool = True
    stats: RunStats | None = None
    rows: int = 0
    finished: set[str] = field(default_factory=set)
    last_drain_ns: int | None = None
    lost_ns: int | None = None
    #: the drain call in flight, and since when (driver wall clock)
    outstanding: Any = None
    outstanding_since_ns: int = 0
    warned_slow: bool = False

    @property
    def sent(self) -> int:
        return self.stats.requests_sent if self.stats is not None else 0

    @property
    def lost(self) -> int:
        return max(self.sent - self.rows, 0)

    def cut_ids(self) -> list[str]:
        """Its sessions that did not run to their end, in the order they were dealt."""
        return [s for s in self.session_ids if s not in self.finished]

    def settle(self) -> None:
        """Write the final figures into ``info``."""
        done = self.stats.agents_done if self.stats is not None else 0
        self.info.update(
            alive=self.alive,
            requests=self.rows,
            requests_sent=self.sent,
            records_lost=self.lost,
            sessions_cut=max(int(self.info["sessions"]) - done, 0),
        )
        if not self.alive:
            self.info["sessions_cut_ids"] = self.cut_ids()
            self.info["lost_at"] = iso_utc(self.lost_ns) if self.lost_ns is not None else None
            self.info["last_drain_at"] = (
                iso_utc(self.last_drain_ns) if self.last_drain_ns is not None else None
            )


class Drains:
    """Every tick: each live worker's records into the sink, its stats into the live view."""

    def __init__(
        self,
        accounts: list[WorkerAccount],
        sink: TraceSink,
        stats: RunStats,
        conditions: StopConditions,
        *,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.accounts = accounts
        self.sink = sink
        self.stats = stats
        self.conditions = conditions
        self.clock_ns = clock_ns

    def alive(self) -> list[WorkerAccount]:
        return [a for a in self.accounts if a.alive]

    def lose(self, account: WorkerAccount, why: str) -> None:
        """The worker is gone: what it handed over stays, the rest is counted lost."""
        if not account.alive:
            return
        account.alive = False
        account.lost_ns = self.clock_ns()
        account.outstanding = None
        if account.stats is not None:
            account.stats.in_flight = 0  # nothing of it is in flight any more
        account.info["error"] = why[:300]
        where = account.info.get("node_ip") or account.info.get("host") or "?"
        log.warning(
            "worker %d on node %s (%s) lost: %s; %d of its sessions cut, %d of its requests not in the trace",
            account.index, where, str(account.info.get("node_id", ""))[:12], why[:200],
            len(account.cut_ids()), account.lost,
        )  # fmt: skip

    def tick(self, wait_s: float) -> None:
        """Ask every live worker without a drain in flight for one, and take the answers that
        come within ``wait_s``."""
        now = self.clock_ns()
        for a in self.alive():
            if a.outstanding is None:
                a.outstanding = a.actor.drain.remote()
                a.outstanding_since_ns = now
        self._collect(wait_s)
        self.merge()

    def final(self) -> None:
        """After every worker's run: one last drain of each live worker, issued after the run
        ended, so everything it recorded is taken (or the worker is counted lost)."""
        deadline = time.monotonic() + FINAL_DRAIN_S
        while any(a.outstanding is not None for a in self.alive()) and time.monotonic() < deadline:
            self._collect(min(1.0, max(deadline - time.monotonic(), 0.0)))
        asked_ns = self.clock_ns()
        for a in self.alive():
            a.outstanding = a.actor.drain.remote()
            a.outstanding_since_ns = asked_ns
        while any(a.outstanding is not None for a in self.alive()) and time.monotonic() < deadline:
            self._collect(min(1.0, max(deadline - time.monotonic(), 0.0)))
        for a in self.alive():
            if a.last_drain_ns is None or a.last_drain_ns < asked_ns:  # its last records never came
                self.lose(a, f"did not answer its last drain within {FINAL_DRAIN_S:g} s")
        self.merge()

    def _collect(self, wait_s: float) -> None:
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        waiting = {a.outstanding: a for a in self.alive() if a.outstanding is not None}
        if not waiting:
            return
        ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=wait_s)
        now = self.clock_ns()
        for ref in ready:
            a = waiting[ref]
            a.outstanding = None
            try:
                batch, wstats, finished = ray.get(ref)
            except ActorUnavailableError:  # not reachable now: its run's call says whether it is gone
                continue
            except RayActorError as exc:
                self.lose(a, f"{type(exc).__name__}: {exc}")
                continue
            a.last_drain_ns = now
            a.finished.update(finished)
            if batch is not None and batch.num_rows:
                try:
                    self.sink.write_batch(batch)
                except TraceWriteError as exc:
                    self.conditions.halt(str(exc))
                a.rows += batch.num_rows
                if not self.conditions.cancelling:
                    self.conditions.observe_many(batch.column("status").to_pylist())
            a.stats = wstats
        for a in self.alive():
            if (
                a.outstanding is not None
                and not a.warned_slow
                and now - a.outstanding_since_ns > SLOW_DRAIN_S * 1e9
            ):
                a.warned_slow = True
                log.warning("worker %d has not answered a drain for %g s", a.index, SLOW_DRAIN_S)

    def merge(self) -> None:
        merged = RunStats()
        for a in self.accounts:
            if a.stats is not None:
                merged.merge(a.stats)
        self.stats.replace_with(merged)
