"""QuietCollector: garbage collection moved to where it cannot delay a send."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from swarm.runtime.gc_policy import FORCE_FACTOR, QuietCollector


@pytest.fixture
def small_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(100, 2, 2)
    try:
        yield
    finally:
        gc.set_threshold(*before)


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_automatic_collection_is_off_inside_and_restored_after() -> None:
    assert gc.isenabled()
    with QuietCollector():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_collects_due_garbage_when_quiet_and_defers_when_not(small_thresholds: None) -> None:
    with QuietCollector() as collector:
        gc.collect()
        cycles = [_Cycle() for _ in range(150)]  # over the youngest threshold
        del cycles
        assert collector.due_generation() is not None
        collector.collect_if_due(quiet=False)  # due, but not overdue: deferred
        assert sum(collector.collections) == 0
        collector.collect_if_due(quiet=True)
        assert sum(collector.collections) == 1
        assert collector.due_generation() is None


def test_overdue_garbage_is_collected_even_without_quiet(small_thresholds: None) -> None:
    with QuietCollector() as collector:
        gc.collect()
        keep = [_Cycle() for _ in range(FORCE_FACTOR * 100 + 50)]
        collector.collect_if_due(quiet=False)
        assert sum(collector.collections) == 1
        del keep


def test_older_generations_follow_the_interpreter_thresholds(small_thresholds: None) -> None:
    with QuietCollector() as collector:
        gc.collect()
        for _ in range(12):
            junk = [_Cycle() for _ in range(150)]
            del junk
            collector.collect_if_due(quiet=True)
        young, middle, old = collector.collections
        assert young > middle > 0 and old > 0


def test_agent_run_collector_defers_full_passes_and_restores_the_collector() -> None:
    import gc

    from swarm.runtime.gc_policy import AGENT_RUN_THRESHOLDS, AgentRunCollector

    before = gc.get_threshold()
    full_passes: list[int] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full_passes.append(1)

    gc.callbacks.append(on_gc)
    try:
        with AgentRunCollector() as collector:
            assert gc.get_threshold() == AGENT_RUN_THRESHOLDS
            assert gc.get_freeze_count() > 0  # what was alive is left out of the passes
            keep = [[i] for i in range(200_000)]  # enough young survivors for many young passes
            assert full_passes == []  # none of them grew into a full pass
            collector.full_collection()
            assert full_passes == [1] and collector.full_collections == 1
            del keep
    finally:
        gc.callbacks.remove(on_gc)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_long_full_pass_puts_the_next_further_off() -> None:
    """A full pass is due a minute after the last one ended, or, after a long pass, when the
    pass is 5 % of the time since (a simulation's heap of tens of millions of objects: passes
    of seconds once a minute were 38 % of its time); a short pass keeps the minute."""
    from swarm.runtime.gc_policy import FULL_COLLECTION_SHARE, AgentRunCollector

    now = [0.0]
    lengths = iter([0.2, 10.0, 1.0, 0.5])

    def collect() -> int:
        now[0] += next(lengths)
        return 50_000  # each pass frees plenty: no back-off

    collector = AgentRunCollector(full_every_s=60.0, clock_s=lambda: now[0], collect=collect)
    ran = []
    for _ in range(400):  # the sampler's calls, a second apart
        now[0] += 1.0
        if collector.full_collection_if_due():
            ran.append(round(now[0], 1))
    assert FULL_COLLECTION_SHARE == 0.05
    # a 0.2 s pass, the next a minute after its end; a 10 s pass, the next 200 s after its end;
    # a 1 s pass, the next a minute on again
    assert ran == [60.2, 130.2, 331.2, 391.7]
    assert collector.full_collections == 4


def test_full_passes_that_free_nothing_come_ever_rarer_until_one_frees_plenty() -> None:
    """A simulation of 100,000 agents walked millions of live objects a pass (seconds each) and
    freed none: each pass that frees fewer than ``FULL_COLLECTION_FEW_FREED`` objects doubles
    the wait before the next (at most ``FULL_COLLECTION_MOST_BACKOFF`` times); a pass that
    frees plenty puts the minute back."""
    import itertools

    from swarm.runtime.gc_policy import (
        FULL_COLLECTION_FEW_FREED,
        FULL_COLLECTION_MOST_BACKOFF,
        AgentRunCollector,
    )

    now = [0.0]
    freed = iter([0, FULL_COLLECTION_FEW_FREED - 1, 3, 0, 0, 0, FULL_COLLECTION_FEW_FREED, 0])

    def collect() -> int:
        return next(freed)  # passes of no length: the minute rules

    collector = AgentRunCollector(full_every_s=60.0, clock_s=lambda: now[0], collect=collect)
    ran: list[int] = []
    backoffs: list[int] = []
    while len(ran) < 8:  # the sampler's calls, a second apart
        now[0] += 1.0
        if collector.full_collection_if_due():
            ran.append(round(now[0]))
            backoffs.append(collector.backoff)
    assert FULL_COLLECTION_MOST_BACKOFF == 16
    assert backoffs == [2, 4, 8, 16, 16, 16, 1, 2]
    gaps = [b - a for a, b in itertools.pairwise(ran)]
    assert ran[0] == 60 and gaps == [120, 240, 480, 960, 960, 960, 60]
