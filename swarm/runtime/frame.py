"""The frame of every run: targets resolved, the run folder and manifest, one TargetRun per target.

Place in the map (docs/architecture.md, "Runtime"): what ``swarm run`` and ``swarm replay`` share
(``launch``). It resolves the targets (probing a URL for its engine and model when not given;
starting the emulator in both profiles on loopback when no target is given), writes
``runs/<run_id>/manifest.json``, hands each target's TargetRun (the same source, a fresh sink)
to the Executor, scrapes the target's metrics meanwhile, and finishes the manifest with status,
counts, parts and workers, whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from swarm import __version__
from swarm.clients.client import normalise_base_url, read_api_key, redact_url
from swarm.engines.registry import get_engine
from swarm.errors import InputError
from swarm.request import Timeouts
from swarm.runtime.context import ResolvedTarget, TargetOutcome, TargetRun
from swarm.runtime.executor import Executor
from swarm.runtime.live_stats import LATE_NS, RunStats, behind_schedule
from swarm.runtime.metrics_scraper import ServerMetricsScraper, write_server_metrics
from swarm.runtime.sources import RequestSource
from swarm.runtime.specs import TargetSpec
from swarm.trace.manifest import RunManifest, RunStatus, TargetInfo, WorkerInfo, new_run_id, versions
from swarm.trace.sink import ParquetTraceSink, TraceWriteError
from swarm.trace.storage import RunStorage

log = logging.getLogger(__name__)


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


def resolve_target(spec: TargetSpec) -> ResolvedTarget:
    """Probe a target for what the spec leaves open (engine, model); InputError if unreachable."""
    from swarm.clients.probe import probe
    from swarm.engines.registry import check_dialect

    url = normalise_base_url(spec.url)
    result = asyncio.run(
        probe(
            url,
            engine=spec.engine,
            model=spec.model,
            api_key_env=spec.api_key_env,
            api_key_file=spec.api_key_file,
            send_requests=False,
        )
    )
    engine = spec.engine or result.engine
    if engine is None:
        raise InputError(
            f"target {spec.name}: cannot tell which engine serves {redact_url(url)}; pass --engine"
        )
    profile = get_engine(engine)
    dialect = check_dialect(profile, spec.dialect or profile.default_dialect)
    return ResolvedTarget(
        name=spec.name,
        url=url,
        engine=engine,
        dialect=dialect,
        model=spec.model or result.model or "default",
        api_key_env=spec.api_key_env,
        api_key_file=spec.api_key_file,
        emulated=result.emulator,
        server_info={
            "version": result.server_version,
            "endpoints": result.endpoints,
            "metrics_path": result.metrics_path,
            "block_tokens": result.block_tokens,
        },
    )


@contextlib.contextmanager
def embedded_targets(extra_args: list[str]) -> Iterator[list[TargetSpec]]:
    """The emulator in both profiles, each its own process on a free loopback port."""
    from swarm.emulator.process import EmulatorProcess

    procs: list[EmulatorProcess] = []
    try:
        for engine in ("sglang", "trtllm"):
            procs.append(EmulatorProcess(["--engine", engine, *extra_args]))
        yield [
            TargetSpec(name=f"emulator-{engine}", url=p.url, engine=engine)
            for engine, p in zip(("sglang", "trtllm"), procs, strict=True)
        ]
    finally:
        for p in procs:
            p.stop()


def _scraper_for(target: ResolvedTarget, interval_s: float) -> ServerMetricsScraper | None:
    """A scraper of the target's Prometheus endpoint (the profile's path), if it has one."""
    path = get_engine(target.engine).metrics_path
    if not path or interval_s <= 0:
        return None
    key = read_api_key(target.api_key_env, target.api_key_file)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return ServerMetricsScraper(
        target=target.name, engine=target.engine, url=target.url.rstrip("/") + path,
        interval_s=interval_s, headers=headers,
    )  # fmt: skip


def run_on_targets(
    target_specs: list[TargetSpec],
    source: RequestSource,
    executor: Executor,
    *,
    output_dir: str,
    record_text: bool,
    emulator_args: list[str],
    manifest_fields: dict[str, Any],
    timeouts: Timeouts | None = None,
    max_error_rate: float | None = None,
    error_window: int = 100,
    on_target_start: Callable[[ResolvedTarget, RunStats], None] | None = None,
    metrics_interval_s: float = 1.0,
    flush_interval_s: float = 10.0,
) -> RunResult:
    """Resolve targets (or start the emulators), create the run folder and manifest, run
    ``source`` against each target with ``executor`` (a fresh sink each), and finish the
    manifest with status, counts, parts and workers, whatever happens."""
    sessions_planned = source.session_count()
    run_id = new_run_id()
    location = f"{output_dir.rstrip('/')}/{run_id}"
    storage = RunStorage.at(location)
    with contextlib.ExitStack() as stack:
        specs = target_specs or stack.enter_context(embedded_targets(emulator_args))
        names = [t.name for t in specs]
        if len(set(names)) != len(names):
            raise InputError(f"target names must differ: {names}")
        targets = [resolve_target(t) for t in specs]
        stack.enter_context(executor)
        if storage.exists(""):
            raise InputError(f"{location} already exists")
        storage.makedirs()
        manifest = RunManifest(
            run_id=run_id,
            swarm_version=__version__,
            targets=[
                TargetInfo(
                    name=t.name,
                    url=redact_url(t.url),
                    engine=t.engine,
                    dialect=t.dialect,
                    model=t.model,
                    emulated=t.emulated,
                    api_key_env=t.api_key_env,
                    api_key_file=t.api_key_file,
                    server_info=t.server_info or {},
                    sessions_planned=sessions_planned,
                )
                for t in targets
            ],
            versions=versions(),
            **manifest_fields,
        )
        manifest.write(storage)
        result = RunResult(run_dir=location, storage=storage, manifest=manifest)
        status = RunStatus.COMPLETE
        reasons: list[str] = []
        scrapers: list[ServerMetricsScraper] = []
        infos = {t.name: t for t in manifest.targets}
        ran: set[str] = set()
        try:
            for target in targets:
                info = infos[target.name]
                ran.add(target.name)
                stats = RunStats()
                if on_target_start is not None:
                    on_target_start(target, stats)
                sink = ParquetTraceSink(
                    storage, writer=_safe_name(target.name), keep_text=record_text,
                    flush_interval_s=flush_interval_s,
                )  # fmt: skip
                scraper = _scraper_for(target, metrics_interval_s)
                if scraper is not None:
                    scrapers.append(scraper.start())
                started = time.monotonic()
                try:
                    outcome = executor.run_target(
                        TargetRun(
                            source,
                            target,
                            sink,
                            stats,
                            run_id=run_id,
                            timeouts=timeouts or Timeouts(),
                            storage=storage,
                            keep_text=record_text,
                            max_error_rate=max_error_rate,
                            error_window=error_window,
                        )
                    )
                finally:
                    if scraper is not None:
                        scraper.stop()
                    try:
                        sink.close()
                    except TraceWriteError as exc:
                        log.error("%s", exc)
                    for k, v in stats.by_status.items():
                        manifest.counts[k] = manifest.counts.get(k, 0) + v
                    manifest.requests_sent += stats.requests_sent
                    info.sessions_started = stats.agents_started
                    info.sessions_finished = stats.agents_done
                    info.sessions_cut = stats.agents_cut
                    lost = sink.rows_lost
                    manifest.records_lost += lost
                    manifest.write(storage)
                if behind_schedule(stats):
                    log.warning(
                        "target %s: %d of %d requests were sent more than %d ms after they were due "
                        "(not counting waits for the in-flight cap): the generator could not keep its "
                        "schedule (queue_ns - slot_wait_ns in the trace)",
                        target.name, stats.late, stats.requests, LATE_NS // 1_000_000,
                    )  # fmt: skip
                log.info(
                    "target %s: %d requests in %.1f s",
                    target.name,
                    stats.requests,
                    time.monotonic() - started,
                )
                result.outcomes[target.name] = outcome
                manifest.workers += [WorkerInfo(**w) for w in outcome.workers]
                dead = [w for w in outcome.workers if not w.get("alive", True)]
                if dead:
                    cut = sum(int(w.get("sessions_cut", 0)) for w in dead)
                    info.sessions_lost = cut
                    where = ", ".join(
                        f"{w['worker']}"
                        + (f" (node {w['node_ip'] or w['node_id'][:12]})" if w.get("node_id") else "")
                        for w in dead
                    )
                    reasons.append(
                        f"target {target.name}: worker(s) {where} died; {cut} sessions cut, "
                        f"{outcome.records_lost_with_workers} records lost with them"
                    )
                manifest.records_lost_with_workers += outcome.records_lost_with_workers
                lost += outcome.records_lost  # rows workers could not write themselves
                manifest.records_lost += outcome.records_lost
                failure = sink.failure
                info.outcome = RunStatus.COMPLETE.value
                if lost or failure:
                    status = RunStatus.FAILED
                    info.outcome = status.value
                    why = failure or outcome.halt_reason or "the trace could not be written"
                    reasons.append(f"target {target.name}: {why}; {lost} records not written")
                    break
                if outcome.halt_reason:
                    status = RunStatus.STOPPED if status is RunStatus.COMPLETE else status
                    info.outcome = RunStatus.STOPPED.value
                    reasons.append(f"target {target.name}: {outcome.halt_reason}")
                if outcome.interrupted:
                    status = RunStatus.INTERRUPTED
                    info.outcome = status.value
                    reasons.append("interrupted by a signal")
                    break
        except KeyboardInterrupt:
            status = RunStatus.INTERRUPTED
            reasons.append("interrupted (KeyboardInterrupt)")
        except BaseException as exc:
            status = RunStatus.FAILED
            reasons.append(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            not_run = []
            for info in manifest.targets:
                if info.outcome == "pending":  # the run ended while (or before) it ran
                    info.outcome = status.value if info.name in ran else "not_run"
                if info.outcome == "not_run":
                    not_run.append(info.name)
            if not_run:
                reasons.append(f"not run: {', '.join(not_run)} (the run ended before it came to them)")
            manifest.status = status
            manifest.status_reason = "; ".join(reasons) or None
            manifest.parts = [n for n in storage.list("requests") if n.endswith(".parquet")]
            try:
                manifest.server_metrics = write_server_metrics(storage, scrapers)
            except (OSError, pa.ArrowException) as exc:  # the requests matter more; say so and go on
                log.error("could not write the server metrics: %s", exc)
            manifest.finished_at = dt.datetime.now(dt.timezone.utc).isoformat()
            manifest.write(storage)
    return result
