"""QuietCollector: Python's cyclic garbage collector, run only where it cannot delay a send.

Place in the map (docs/architecture.md, "Runtime"): the Dispatcher picks one of the two policies here
by the kind of schedule. For a timed schedule (a timed replay) it knows when its next send is
due: it turns automatic collection off and calls ``collect_if_due`` whenever it has a quiet
stretch ahead. A collection walks every container object that is still
tracked; with prompts of tens of thousands of tokens in flight one pass took 2-5 ms for the
youngest generation and about 20 ms for the oldest (measured during a Mooncake replay), long
enough to make a whole burst of sends late.

Collections follow the interpreter's own thresholds (``gc.get_threshold``), so memory behaves
as with automatic collection, only shifted in time; if no quiet stretch comes for
``FORCE_FACTOR`` times the youngest threshold, a collection runs anyway.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Collect regardless of quiet once the youngest generation holds this many times its threshold.
FORCE_FACTOR = 20


class QuietCollector:
    """Context manager: automatic collection off inside, collections at the caller's call."""

    def __init__(self) -> None:
        self._was_enabled = False
        self.collections = [0, 0, 0]

    def __enter__(self) -> QuietCollector:
        self._was_enabled = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._was_enabled:
            gc.enable()

    def due_generation(self) -> int | None:
        """The generation the interpreter would collect now, or None."""
        count0, count1, count2 = gc.get_count()
        t0, t1, t2 = gc.get_threshold()
        if t0 <= 0 or count0 <= t0:
            return None
        if count1 + 1 > t1:
            return 2 if count2 + 1 > t2 else 1
        return 0

    def collect_if_due(self, quiet: bool = True) -> None:
        """Collect what is due; when not ``quiet``, only if collection is long overdue."""
        generation = self.due_generation()
        if generation is None:
            return
        if not quiet and gc.get_count()[0] <= FORCE_FACTOR * gc.get_threshold()[0]:
            return
        gc.collect(generation)
        self.collections[generation] += 1


#: Young-generation thresholds while agents run: fewer, larger young passes (700, 10 is the
#: interpreter's default), and no automatic full pass at all.
AGENT_RUN_THRESHOLDS = (2000, 20, 1 << 30)
#: A full collection runs at most this often during an agent run (cyclic garbage, e.g. the
#: tracebacks of failed requests, is bounded by it).
FULL_COLLECTION_EVERY_S = 60.0
#: ... and takes at most this share of the process's time: after a pass of ``d`` seconds the
#: next waits ``d / FULL_COLLECTION_SHARE`` at least. A simulation of 100,000 agents holds tens
#: of millions of objects: a pass a minute took 38 % of its time (a sampling profile).
FULL_COLLECTION_SHARE = 0.05
#: A full pass that finds fewer unreachable objects than this did not pay for its walk: the
#: wait before the next (the two rules above) doubles, up to ``FULL_COLLECTION_MOST_BACKOFF``
#: times; a pass that finds this many or more puts it back. The 100,000-agent simulation's
#: passes (2.7 s, then 5.1 s: a walk of every coroutine, request and plan alive) found none at
#: all. Cyclic garbage that dies young (a failed request's traceback) is the young passes'; a
#: full pass finds only cycles that lived through them, which a wait this much longer holds
#: longer (objects counted, not bytes: a few such cycles may hold a large prompt).
FULL_COLLECTION_FEW_FREED = 10_000
FULL_COLLECTION_MOST_BACKOFF = 16


class AgentRunCollector:
    """The collector's policy while thousands of agents stream: young passes as usual (a bit
    rarer), and the full pass, which walks every coroutine, task and future in flight (130-190
    ms measured at 2,000 agents, ten times in ten seconds, each a stall of every stream), only
    once a minute, rarer where a pass is long (``FULL_COLLECTION_SHARE``), and rarer again
    while passes find next to nothing to free (``FULL_COLLECTION_FEW_FREED``), called by the
    Dispatcher's sampler (``full_collection_if_due``). ``clock_s`` and ``collect`` are, but in
    tests, the process's monotonic clock and ``gc.collect`` (which returns how many objects it
    found unreachable). What was alive when the run
    began is frozen (left out of every pass) and put back at the end; the thresholds are
    restored too."""

    def __init__(
        self,
        full_every_s: float = FULL_COLLECTION_EVERY_S,
        clock_s: Callable[[], float] = time.monotonic,
        collect: Callable[[], int] = gc.collect,
    ) -> None:
        self.full_every_s = full_every_s
        self._thresholds = gc.get_threshold()
        self.full_collections = 0
        #: the wait before the next full pass is this many times the rules' (1, 2, 4, ...)
        self.backoff = 1
        self._clock_s, self._collect = clock_s, collect
        self._next_full_s = clock_s() + full_every_s

    def start(self) -> AgentRunCollector:
        self._thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(*AGENT_RUN_THRESHOLDS)
        self._next_full_s = self._clock_s() + self.full_every_s
        self.backoff = 1
        return self

    def stop(self) -> None:
        gc.set_threshold(*self._thresholds)
        gc.unfreeze()

    def __enter__(self) -> AgentRunCollector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def full_collection(self) -> None:
        """One full pass now; the next is due ``full_every_s`` after its end, or its length
        over ``FULL_COLLECTION_SHARE`` if that is longer, times ``backoff``: doubled by this pass
        (up to ``FULL_COLLECTION_MOST_BACKOFF``) if it found fewer than
        ``FULL_COLLECTION_FEW_FREED`` objects unreachable, back to 1 if it found as many or more."""
        began = self._clock_s()
        found = self._collect()
        ended = self._clock_s()
        self.full_collections += 1
        if found < FULL_COLLECTION_FEW_FREED:
            self.backoff = min(2 * self.backoff, FULL_COLLECTION_MOST_BACKOFF)
        else:
            self.backoff = 1
        wait_s = max(self.full_every_s, (ended - began) / FULL_COLLECTION_SHARE) * self.backoff
        self._next_full_s = ended + wait_s
        log.debug("full collection: %d unreachable, %.2f s; the next in %.0f s", found, ended - began, wait_s)

    def full_collection_if_due(self) -> bool:
        """A full pass if one is due (whether it ran)."""
        if self._clock_s() < self._next_full_s:
            return False
        self.full_collection()
        return True
