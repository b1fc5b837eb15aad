"""A run: one workload against one or more targets, one after the other, into one run folder.

Place in the map (docs/architecture.md): what ``swarm run`` calls. It resolves the targets (probing a
URL for its engine and model when not given; starting the emulator in both profiles on
loopback when no target is given), writes ``runs/<run_id>/manifest.json``, runs the identical
workload against each target through an Executor, streams records into the TraceSink, and
finishes the manifest with status and counts. Executors are a small protocol; the in-process
one lives here, the Ray one in the cluster layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from swarm import __version__
from swarm.breaker import CircuitBreaker
from swarm.catalog import Catalog
from swarm.engines.client import Timeouts, normalise_base_url, read_api_key, redact_url
from swarm.engines.profiles import get_profile
from swarm.errors import InputError
from swarm.live_stats import LATE_NS, RunStats, behind_schedule
from swarm.record import RequestRecord
from swarm.runner import Halt, ResolvedTarget, TargetOutcome, run_agents
from swarm.server_metrics import ServerMetricsScraper, write_server_metrics
from swarm.trace.manifest import RunManifest, RunStatus, TargetInfo, WorkerInfo, new_run_id, versions
from swarm.trace.sink import ParquetTraceSink, TraceSink, TraceWriteError
from swarm.trace.storage import RunStorage
from swarm.workload import Workload, WorkloadSpec, check_mix

log = logging.getLogger(__name__)


class TargetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="label in the trace's `target` column")
    url: str = Field(description="base URL of the server")
    engine: str | None = Field(default=None, description="engine profile; detected when absent")
    dialect: str | None = Field(default=None, description="API dialect; the engine's default when absent")
    model: str | None = Field(default=None, description="model name; the server's first when absent")
    api_key_env: str | None = Field(default=None, description="environment variable holding the API key")
    api_key_file: str | None = Field(default=None, description="file holding the API key (its first line)")


class TimeoutSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    connect_s: float | None = Field(default=10.0, gt=0, description="connecting, seconds")
    first_token_s: float | None = Field(default=120.0, gt=0, description="from sending to the first token")
    total_s: float | None = Field(default=600.0, gt=0, description="a whole request")
    idle_s: float | None = Field(default=60.0, gt=0, description="longest silence mid-stream")


class RunSpec(BaseModel):
    """Everything ``swarm run`` needs: a workload, targets, and where to write."""

    model_config = ConfigDict(extra="forbid")

    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    targets: list[TargetSpec] = Field(default_factory=list, description="none: the emulator in both profiles")
    output_dir: str = Field(default="runs", description="run folders are created here")
    record_text: bool = Field(default=False, description="store prompt parts and outputs in the trace")
    executor: Literal["ray", "inprocess"] = Field(
        default="ray",
        description="ray: async Ray actors (a local Ray when no address); inprocess: one process",
    )
    workers: int | None = Field(default=None, ge=1, description="Ray workers (default: CPUs less one)")
    address: str | None = Field(
        default=None, description="Ray cluster: auto, ray://host:port (default: RAY_ADDRESS or local)"
    )
    worker_writes: bool = Field(
        default=False,
        description="Ray workers write their Parquet parts to output_dir themselves (shared storage)",
    )
    ray_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="starting a local Ray or joining a cluster may take this long, seconds",
    )
    timeouts: TimeoutSpec = Field(default_factory=TimeoutSpec)
    max_error_rate: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="circuit breaker: stop sending to a target when this share of the last "
        "error_window requests failed (the reason goes to the manifest); off when absent",
    )
    error_window: int = Field(default=100, ge=1, description="requests the circuit breaker looks back over")
    metrics_interval_s: float = Field(
        default=1.0, ge=0, description="scrape the targets' Prometheus metrics this often, seconds; 0: never"
    )
    flush_interval_s: float = Field(
        default=10.0, gt=0, description="trace parts are closed at least this often: what a kill -9 can lose"
    )
    emulator_args: list[str] = Field(
        default_factory=list, description="extra `swarm emulate` flags for the embedded emulators"
    )


class Executor(Protocol):
    """Runs a workload's agents against one target; every record ends up in ``sink``
    (or, for executors whose workers write themselves, under ``storage``)."""

    def run_target(
        self,
        workload: Workload,
        target: ResolvedTarget,
        sink: TraceSink,
        stats: RunStats,
        run_id: str,
        timeouts: Timeouts,
        storage: RunStorage,
        keep_text: bool,
        breaker: CircuitBreaker | None = None,
    ) -> TargetOutcome: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...


class InProcessExecutor:
    """All agents in this process's one event loop. SIGINT/SIGTERM stop the run gracefully."""

    def __enter__(self) -> InProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run_target(
        self,
        workload: Workload,
        target: ResolvedTarget,
        sink: TraceSink,
        stats: RunStats,
        run_id: str,
        timeouts: Timeouts,
        storage: RunStorage,
        keep_text: bool,
        breaker: CircuitBreaker | None = None,
    ) -> TargetOutcome:
        halt = Halt()

        def on_record(record: RequestRecord) -> None:
            try:
                sink.write(record)
                sink.maybe_rotate()
            except TraceWriteError as exc:
                halt.trip(str(exc))

        async def main(stop: asyncio.Event) -> TargetOutcome:
            return await run_agents(
                workload,
                range(workload.n_agents),
                target,
                on_record,
                stats=stats,
                run_id=run_id,
                timeouts=timeouts,
                stop=stop,
                record_text=keep_text,
                halt=halt,
                breaker=breaker,
            )

        outcome: TargetOutcome = run_async_with_signals(main)
        return outcome


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
    from swarm.engines.probe import probe
    from swarm.engines.profiles import check_dialect, get_profile

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
    profile = get_profile(engine)
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


def make_executor(spec: RunSpec) -> Executor:
    if spec.executor == "inprocess":
        return InProcessExecutor()
    from swarm.cluster.executor import RayExecutor

    return RayExecutor(
        workers=spec.workers, address=spec.address, worker_writes=spec.worker_writes,
        connect_timeout_s=spec.ray_timeout_s, flush_interval_s=spec.flush_interval_s,
    )  # fmt: skip


SendToTarget = Callable[[ResolvedTarget, TraceSink, RunStats, str, RunStorage], TargetOutcome]


def _scraper_for(target: ResolvedTarget, interval_s: float) -> ServerMetricsScraper | None:
    """A scraper of the target's Prometheus endpoint (the profile's path), if it has one."""
    path = get_profile(target.engine).metrics_path
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
    *,
    output_dir: str,
    record_text: bool,
    emulator_args: list[str],
    manifest_fields: dict[str, Any],
    send: SendToTarget,
    context: contextlib.AbstractContextManager[Any] | None = None,
    on_target_start: Callable[[ResolvedTarget, RunStats], None] | None = None,
    metrics_interval_s: float = 1.0,
    flush_interval_s: float = 10.0,
    sessions_planned: int = 0,
) -> RunResult:
    """The frame of every run: resolve targets (or start the emulators), create the run folder
    and manifest, call ``send`` once per target with a fresh sink, and finish the manifest with
    status, counts, parts and workers, whatever happens."""
    run_id = new_run_id()
    location = f"{output_dir.rstrip('/')}/{run_id}"
    storage = RunStorage.at(location)
    with contextlib.ExitStack() as stack:
        specs = target_specs or stack.enter_context(embedded_targets(emulator_args))
        names = [t.name for t in specs]
        if len(set(names)) != len(names):
            raise InputError(f"target names must differ: {names}")
        targets = [resolve_target(t) for t in specs]
        if context is not None:
            stack.enter_context(context)
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
                    outcome = send(target, sink, stats, run_id, storage)
                finally:
                    if scraper is not None:
                        scraper.stop()
                    try:
                        sink.close()
                    except TraceWriteError as exc:
                        log.error("%s", exc)
                    for k, v in stats.by_status.items():
                        manifest.counts[k] = manifest.counts.get(k, 0) + v
                    info.sessions_started = stats.agents_started
                    info.sessions_finished = stats.agents_done
                    info.sessions_cut = stats.agents_cut
                    lost = sink.rows_lost if isinstance(sink, ParquetTraceSink) else 0
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
                    reasons.append(
                        f"target {target.name}: worker(s) {', '.join(str(w['worker']) for w in dead)} died; {cut} sessions cut"
                    )
                lost += outcome.records_lost  # rows workers could not write themselves
                manifest.records_lost += outcome.records_lost
                failure = sink.failure if isinstance(sink, ParquetTraceSink) else None
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


def execute_run(
    spec: RunSpec,
    *,
    catalog: Catalog | None = None,
    executor: Executor | None = None,
    on_target_start: Callable[[ResolvedTarget, RunStats], None] | None = None,
    source: str = "run spec",
) -> RunResult:
    """Run ``spec``; returns the run folder and its final manifest. Profiles and topologies
    are resolved first (errors name ``source`` and the field), then targets are probed."""
    check_mix(spec.workload, catalog, source)
    workload = Workload(spec.workload, catalog)
    chosen = executor or make_executor(spec)
    t = spec.timeouts
    timeouts = Timeouts(t.connect_s, t.first_token_s, t.total_s, t.idle_s)

    def send(
        target: ResolvedTarget, sink: TraceSink, stats: RunStats, run_id: str, storage: RunStorage
    ) -> TargetOutcome:
        breaker = CircuitBreaker(spec.max_error_rate, spec.error_window) if spec.max_error_rate else None
        return chosen.run_target(
            workload, target, sink, stats, run_id, timeouts, storage, spec.record_text, breaker
        )

    return run_on_targets(
        spec.targets,
        output_dir=spec.output_dir,
        record_text=spec.record_text,
        emulator_args=spec.emulator_args,
        manifest_fields={
            "seed": spec.workload.seed,
            "spec": spec.model_dump(mode="json", exclude={"targets"}),
            "spec_hash": workload.traffic_hash(),
            "workload_digests": workload.content_digests(),
        },
        send=send,
        context=chosen,
        on_target_start=on_target_start,
        flush_interval_s=spec.flush_interval_s,
        metrics_interval_s=spec.metrics_interval_s,
        sessions_planned=workload.n_agents,
    )


def run_async_with_signals(main: Callable[[asyncio.Event], Any]) -> Any:
    """``asyncio.run`` of ``main(stop)`` where SIGINT/SIGTERM set ``stop`` (a graceful stop)."""

    async def runner() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        installed: dict[int, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                previous = signal.getsignal(sig)
                loop.add_signal_handler(sig, stop.set)
                installed[sig] = previous
        try:
            return await main(stop)
        finally:
            # asyncio's removal leaves the default action: put back what was there (the CLI's
            # SIGTERM-as-Ctrl-C), so a signal after this part still ends the run cleanly
            for signum, previous in installed.items():
                loop.remove_signal_handler(signum)
                if previous is not None:
                    signal.signal(signum, previous)

    return asyncio.run(runner())


def summary_rows(run_dir: str | RunStorage) -> dict[str, dict[str, Any]]:
    from swarm.analysis.summary import summarize_run

    return summarize_run(run_dir)
