"""The frame of every run: its targets, its folder, one TargetRun per target, the manifest kept.

Place in the map (docs/architecture.md, "Runtime"): what ``swarm run`` and ``swarm replay`` share
(``launch``). Three steps, each its own module: the targets are resolved (``runtime.targets``:
probed, or the emulator started in both profiles), ``runs/<run_id>/`` is made and each target's
TargetRun (the same source, a fresh sink) goes to the Executor while its metrics are scraped
(here), and the manifest's bookkeeping (``runtime.run_book``) records what each target did and
finishes the manifest with status, counts, parts and workers, whatever happens.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from swarm.errors import InputError
from swarm.runtime.cache_reset import reset_prefix_cache
from swarm.runtime.context import ResolvedTarget, TargetOutcome, TargetRun
from swarm.runtime.executor import Executor
from swarm.runtime.live_stats import LATE_NS, RunStats, behind_schedule
from swarm.runtime.run_book import RunBook
from swarm.runtime.sources import RequestSource
from swarm.runtime.specs import SendSpec
from swarm.runtime.targets import embedded_targets, resolve_targets, scraper_for
from swarm.trace.manifest import RunManifest, RunStatus, new_run_id
from swarm.trace.sink import ParquetTraceSink, TraceSink, TraceWriteError
from swarm.trace.storage import RunStorage

log = logging.getLogger(__name__)

#: called when a target's run begins, with its live counters (the CLI's live view)
OnTargetStart = Callable[[ResolvedTarget, RunStats], None]


@dataclass
class RunResult:
    run_dir: str
    storage: RunStorage
    manifest: RunManifest
    outcomes: dict[str, TargetOutcome] = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        return self.manifest.status is RunStatus.INTERRUPTED


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "target"


def run_on_targets(
    source: RequestSource,
    spec: SendSpec,
    executor: Executor,
    *,
    manifest_fields: dict[str, Any],
    on_target_start: OnTargetStart | None = None,
    resolved: list[ResolvedTarget] | None = None,
) -> RunResult:
    """Resolve ``spec``'s targets (or start the emulators; ``resolved``: these, a simulation's
    twins), create the run folder and manifest, run ``source`` against each target with
    ``executor`` (a fresh sink each), and finish the manifest with status, counts, parts and
    workers, whatever happens."""
    run_id = new_run_id()
    location = f"{spec.output_dir.rstrip('/')}/{run_id}"
    storage = RunStorage.at(location)
    with contextlib.ExitStack() as stack:
        if resolved is not None:
            targets = resolved
        else:
            targets = resolve_targets(spec.targets or stack.enter_context(embedded_targets(spec.emulator_args)))
        stack.enter_context(executor)
        if storage.exists(""):
            raise InputError(f"{location} already exists")
        storage.makedirs()
        book = RunBook(storage, run_id, targets, source.session_count(), manifest_fields, spec.repeats)
        result = RunResult(run_dir=location, storage=storage, manifest=book.manifest)
        try:
            for repeat, target in _turns(targets, spec.repeats):
                book.ran.add(target.name)
                outcome, sink, lost = _run_target(target, source, spec, executor, book, on_target_start, repeat)
                result.outcomes[target.name] = outcome
                if not book.settled(target.name, outcome, sink, lost):
                    break
        except KeyboardInterrupt:
            book.ended(RunStatus.INTERRUPTED, "interrupted (KeyboardInterrupt)")
        except BaseException as exc:
            book.ended(RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
            raise
        finally:
            book.close()
    return result


def _turns(targets: list[ResolvedTarget], repeats: int) -> list[tuple[int, ResolvedTarget]]:
    """The order targets run in: each once per repeat, interleaved (A B A B ...), so a drift of
    the machine over the run falls on every target alike."""
    return [(r, t) for r in range(repeats) for t in targets]


def _run_target(
    target: ResolvedTarget,
    source: RequestSource,
    spec: SendSpec,
    executor: Executor,
    book: RunBook,
    on_target_start: OnTargetStart | None,
    repeat: int = 0,
) -> tuple[TargetOutcome, TraceSink, int]:
    """One target's run (one repeat of it): its prefix cache emptied before a repeat after the
    first, its sink and scraper, the executor's run, the counts into the book (whatever
    happens); the outcome, the sink and the rows it lost."""
    if repeat and not target.simulated:  # a simulated twin starts each run empty
        reset = reset_prefix_cache(target)
        if reset == "none" or reset.startswith("failed"):
            log.warning("target %s, repeat %d: prefix cache not emptied (%s): reuse from the one before may count",
                        target.name, repeat, reset)  # fmt: skip
    stats = RunStats()
    if on_target_start is not None:
        on_target_start(target, stats)
    writer = _safe_name(target.name) + (f".r{repeat}" if repeat else "")
    sink = ParquetTraceSink(
        book.storage, writer=writer, keep_text=spec.record_text, flush_interval_s=spec.flush_interval_s,
    )  # fmt: skip
    scraper = scraper_for(target, spec.metrics_interval_s)
    if scraper is not None:
        book.scrapers.append(scraper.start())
    started = time.monotonic()
    run = TargetRun(
        source, target, sink, stats, run_id=book.manifest.run_id, timeouts=spec.timeouts.timeouts(),
        storage=book.storage, keep_text=spec.record_text, max_error_rate=spec.max_error_rate,
        error_window=spec.error_window, repeat=repeat, receive_clock=spec.receive_clock,
    )  # fmt: skip
    try:
        outcome = executor.run_target(run)
    finally:
        if scraper is not None:
            scraper.stop()
        try:
            sink.close()
        except TraceWriteError as exc:
            log.error("%s", exc)
        lost = book.counted(target.name, stats, sink)
    if behind_schedule(stats):
        log.warning(
            "target %s: %d of %d requests were sent more than %d ms after they were due "
            "(not counting waits for the in-flight cap): the generator could not keep its "
            "schedule (queue_ns - slot_wait_ns in the trace)",
            target.name, stats.late, stats.requests, LATE_NS // 1_000_000,
        )  # fmt: skip
    log.info("target %s: %d requests in %.1f s", target.name, stats.requests, time.monotonic() - started)
    return outcome, sink, lost
