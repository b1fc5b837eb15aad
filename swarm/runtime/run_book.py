"""The manifest's bookkeeping of one run: what each target sent, how it ended, and the run's status.

Place in the map (docs/architecture.md, "Runtime"): the run frame (``runtime.frame``) opens a
``RunBook`` once the run folder exists and tells it, target by target, what happened; the book
writes ``manifest.json`` when the run starts, after each target and at the end, whatever
happens (each time atomically). Counts add up: a target's rows + ``records_lost`` +
``records_lost_with_workers`` = ``requests_sent``.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pyarrow as pa

from swarm import __version__
from swarm.clients.client import redact_url
from swarm.runtime.context import ResolvedTarget, TargetOutcome
from swarm.runtime.live_stats import RunStats
from swarm.runtime.metrics_scraper import ServerMetricsScraper, write_server_metrics
from swarm.trace.manifest import RunManifest, RunStatus, TargetInfo, WorkerInfo, versions
from swarm.trace.sink import TraceSink
from swarm.trace.storage import RunStorage

log = logging.getLogger(__name__)


def _target_info(t: ResolvedTarget, sessions_planned: int) -> TargetInfo:
    return TargetInfo(
        name=t.name, url=redact_url(t.url), engine=t.engine, dialect=t.dialect, model=t.model,
        emulated=t.emulated, api_key_env=t.api_key_env, api_key_file=t.api_key_file,
        server_info=t.server_info or {}, sessions_planned=sessions_planned,
        replicas=[redact_url(u) for u in t.replicas],
        replica_names={redact_url(u): n for u, n in t.replica_names.items()},
    )  # fmt: skip


def _lost_workers_reason(target: str, dead: list[WorkerInfo], lost_records: int) -> str:
    cut = sum(w.sessions_cut for w in dead)
    where = ", ".join(f"{w.worker}" + (f" (node {w.node_ip or w.node_id[:12]})" if w.node_id else "") for w in dead)
    return f"target {target}: worker(s) {where} died; {cut} sessions cut, {lost_records} records lost with them"


class RunBook:
    """The manifest as the run goes, and the run's status and reasons so far."""

    def __init__(
        self,
        storage: RunStorage,
        run_id: str,
        targets: list[ResolvedTarget],
        sessions_planned: int,
        manifest_fields: dict[str, Any],
        repeats: int = 1,
    ) -> None:
        self.storage = storage
        self.manifest = RunManifest(
            run_id=run_id,
            swarm_version=__version__,
            targets=[_target_info(t, sessions_planned * repeats) for t in targets],
            versions=versions(),
            repeats=repeats,
            **manifest_fields,
        )
        self.manifest.write(storage)
        self.status = RunStatus.COMPLETE
        self.reasons: list[str] = []
        #: targets whose run began
        self.ran: set[str] = set()
        self.scrapers: list[ServerMetricsScraper] = []
        self._infos = {t.name: t for t in self.manifest.targets}

    def counted(self, name: str, stats: RunStats, sink: TraceSink) -> int:
        """After a target's run, whatever ended it: its counts and sessions into the manifest
        (written); returns the rows its sink could not write."""
        info, mf = self._infos[name], self.manifest
        for k, v in stats.by_status.items():
            mf.counts[k] = mf.counts.get(k, 0) + v
        mf.requests_sent += stats.requests_sent
        info.sessions_started += stats.sessions_started  # summed over the target's repeats
        info.sessions_finished += stats.sessions_finished
        info.sessions_cut += stats.sessions_cut
        lost = sink.rows_lost
        mf.records_lost += lost
        mf.write(self.storage)
        return lost

    def settled(self, name: str, outcome: TargetOutcome, sink: TraceSink, lost: int) -> bool:
        """A target's outcome into the manifest and the run's status; False when the run must
        end here (its trace could not be written, or it was interrupted)."""
        info, mf = self._infos[name], self.manifest
        mf.workers += outcome.workers
        dead = [w for w in outcome.workers if not w.alive]
        if dead:
            info.sessions_lost += sum(w.sessions_cut for w in dead)
            self.reasons.append(_lost_workers_reason(name, dead, outcome.records_lost_with_workers))
        mf.records_lost_with_workers += outcome.records_lost_with_workers
        lost += outcome.records_lost  # rows workers could not write themselves
        mf.records_lost += outcome.records_lost
        info.outcome = RunStatus.COMPLETE.value
        if lost or sink.failure:
            self.status = RunStatus.FAILED
            info.outcome = self.status.value
            why = sink.failure or outcome.halt_reason or "the trace could not be written"
            self.reasons.append(f"target {name}: {why}; {lost} records not written")
            return False
        if outcome.halt_reason:
            self.status = RunStatus.STOPPED if self.status is RunStatus.COMPLETE else self.status
            info.outcome = RunStatus.STOPPED.value
            self.reasons.append(f"target {name}: {outcome.halt_reason}")
        if outcome.interrupted:
            self.status = RunStatus.INTERRUPTED
            info.outcome = self.status.value
            self.reasons.append("interrupted by a signal")
            return False
        return True

    def ended(self, status: RunStatus, reason: str) -> None:
        """The run ended early: interrupted, or failed with ``reason``."""
        self.status = status
        self.reasons.append(reason)

    def close(self) -> None:
        """The final manifest: status and reasons, targets never run, parts, server metrics."""
        mf = self.manifest
        not_run = []
        for info in mf.targets:
            if info.outcome == "pending":  # the run ended while (or before) it ran
                info.outcome = self.status.value if info.name in self.ran else "not_run"
            if info.outcome == "not_run":
                not_run.append(info.name)
        if not_run:
            self.reasons.append(f"not run: {', '.join(not_run)} (the run ended before it came to them)")
        mf.status = self.status
        mf.status_reason = "; ".join(self.reasons) or None
        mf.parts = [n for n in self.storage.list("requests") if n.endswith(".parquet")]
        try:
            mf.server_metrics = write_server_metrics(self.storage, self.scrapers)
        except (OSError, pa.ArrowException) as exc:  # the requests matter more; say so and go on
            log.error("could not write the server metrics: %s", exc)
        mf.finished_at = dt.datetime.now(dt.timezone.utc).isoformat()
        mf.write(self.storage)
