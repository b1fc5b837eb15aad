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
#: An unreachable worker's last drain is asked again after this long, seconds.
RETRY_S = 0.5
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
    #: the drain call in flight (its number, its ref), and since when (driver wall clock)
    outstanding: tuple[int, Any] | None = None
    outstanding_since_ns: int = 0
    warned_slow: bool = False
    #: why its latest drain failed, when it did (an unreachable worker)
    last_error: str | None = None
    #: drains asked of it so far, and the number of the latest one answered
    asked: int = 0
    answered: int = 0

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
        done = self.stats.sessions_finished if self.stats is not None else 0
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


class RemoteCalls:
    """The few Ray calls ``Drains`` makes, behind a seam so the accounting runs in one process
    in tests: ``wait`` returns the refs ready within the timeout, ``get`` a ref's value or raises.
    ``unavailable`` errors mean "not reachable now, ask again"; ``fatal`` ones that the worker is
    gone (any other Ray error of a call: the actor died, the reply's object was lost with its
    node, the method raised)."""

    def __init__(self) -> None:
        import ray
        from ray.exceptions import ActorUnavailableError, RayError

        self.wait: Callable[[list[Any], float], list[Any]] = lambda refs, timeout_s: ray.wait(
            refs, num_returns=len(refs), timeout=timeout_s
        )[0]
        self.get: Callable[[Any], Any] = ray.get
        self.unavailable: tuple[type[BaseException], ...] = (ActorUnavailableError,)
        self.fatal: tuple[type[BaseException], ...] = (RayError,)


class Drains:
    """Every tick: each live worker's records into the sink, its stats into the live view."""

    def __init__(
        self,
        accounts: list[WorkerAccount],
        sink: TraceSink,
        stats: RunStats,
        conditions: StopConditions,
        *,
        calls: RemoteCalls | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        final_drain_s: float = FINAL_DRAIN_S,
    ) -> None:
        self.accounts = accounts
        self.sink = sink
        self.stats = stats
        self.conditions = conditions
        self.calls = calls if calls is not None else RemoteCalls()
        self.clock_ns = clock_ns
        self.monotonic = monotonic
        self.sleep = sleep
        self.final_drain_s = final_drain_s

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

    def _ask(self, a: WorkerAccount) -> None:
        a.asked += 1
        a.outstanding = (a.asked, a.actor.drain.remote())
        a.outstanding_since_ns = self.clock_ns()

    def tick(self, wait_s: float) -> None:
        """Ask every live worker without a drain in flight for one, and take the answers that
        come within ``wait_s``."""
        for a in self.alive():
            if a.outstanding is None:
                self._ask(a)
        self._collect(wait_s)
        self.merge()

    def final(self) -> None:
        """After every worker's run: one last drain of each live worker, asked after its run
        ended (at once, or as soon as an earlier drain still in flight answers), so everything
        it recorded is taken. A worker whose last drain has not answered by the deadline is
        counted lost, with its last records; an unreachable one is asked again until then."""
        deadline = self.monotonic() + self.final_drain_s
        final_ask: dict[int, int] = {}  # the number of each worker's last drain
        asked_at: dict[int, float] = {}
        while True:
            resting = False
            for a in self.alive():
                if a.outstanding is not None:
                    continue
                if a.index in final_ask:
                    if a.answered >= final_ask[a.index]:
                        continue
                    if self.monotonic() - asked_at[a.index] < RETRY_S:  # unreachable: ask again soon
                        resting = True
                        continue
                self._ask(a)
                final_ask[a.index], asked_at[a.index] = a.asked, self.monotonic()
            waiting = any(a.outstanding is not None for a in self.alive())
            remaining = deadline - self.monotonic()
            if not (waiting or resting) or remaining <= 0:
                break
            if waiting:
                self._collect(min(RETRY_S, remaining))
            else:
                self.sleep(min(RETRY_S, remaining))
        for a in self.alive():
            if a.index not in final_ask or a.answered < final_ask[a.index]:
                why = a.last_error or f"no answer within {self.final_drain_s:g} s"
                self.lose(a, f"its last drain did not come: {why}")
        self.merge()

    def _collect(self, wait_s: float) -> None:
        # keyed by the refs themselves: Ray Client's wait hands back new objects for the same refs
        waiting: dict[Any, tuple[WorkerAccount, int]] = {
            a.outstanding[1]: (a, a.outstanding[0]) for a in self.alive() if a.outstanding is not None
        }
        if not waiting:
            return
        ready = self.calls.wait(list(waiting), wait_s)
        now = self.clock_ns()
        for ref in ready:
            a, number = waiting[ref]
            a.outstanding = None
            try:
                batch, wstats, finished = self.calls.get(ref)
            except self.calls.unavailable as exc:  # not reachable now: asked again next time
                a.last_error = f"{type(exc).__name__}: {exc}"
                continue
            except self.calls.fatal as exc:
                self.lose(a, f"{type(exc).__name__}: {exc}")
                continue
            a.last_error = None
            a.answered = number
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
