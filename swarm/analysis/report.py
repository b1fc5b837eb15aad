"""``swarm report``: every figure of a run, per target, as one typed ``figures.RunReport``.

Place in the map (docs/architecture.md, "Analysis"): reads a run folder (manifest, request rows, server
metrics) and computes with ``figures`` (formulas in ``metrics``) and ``server``; the terminal view
(``cli.report``), the HTML page (``html``, both through ``rows.REPORT_ROWS``) and ``--json``
(``RunReport.as_dict``) all show this same report, so they never disagree.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from swarm.analysis import figures as f
from swarm.analysis import metrics as m
from swarm.analysis.engine_metrics import read_server_metrics, target_figures
from swarm.analysis.figures import RunReport, TargetReport, first_engine
from swarm.analysis.fleet import FleetFigures, fleet_figures
from swarm.analysis.intervals import target_intervals
from swarm.record import LATE_NS
from swarm.trace.manifest import RunManifest, TargetInfo, WorkerInfo, changed_contents
from swarm.trace.reader import (
    NOT_WARMUP,
    BadPart,
    RunLocation,
    as_storage,
    list_parts,
    part_size,
    read_requests_tolerant,
    unfinished_parts,
    warmup_count,
)

#: Columns a breakdown may be made by, in the order reports show them.
BREAKDOWN_KEYS = ("depth", "role", "profile", "topology", "system_prompt_id")
COLUMNS = [
    "target", "engine", "session_id", "node", "parent_nodes", "depth", "role", "profile", "topology",
    "system_prompt_id", "status", "error", "scheduled_ns", "sent_ns", "queue_ns", "slot_wait_ns", "ttft_ns", "e2e_ns",
    "chunk_ns", "prompt_tokens", "completion_tokens", "cached_tokens", "prompt_tokens_est",
    "ideal_cached_tokens_est", "attempt", "warmup", "repeat", "clock", "chunk_lag_ns", "replica",
]  # fmt: skip
#: what a fleet's split of its misses reads besides (warm-ups kept: they fill the replicas' caches)
FLEET_COLUMNS = [
    "target", "replica", "sent_ns", "e2e_ns", "status", "block_hashes", "prompt_tokens", "prompt_tokens_est",
    "cached_tokens", "ideal_cached_tokens_est", "warmup", "repeat", "session_id", "attempt", "replica_from",
]  # fmt: skip


@dataclass
class LoadedRun:
    """A run folder read once: its manifest, request rows and scraped server samples."""

    location: str
    manifest: RunManifest
    requests: pa.Table
    server: pa.Table | None
    unfinished_parts: int
    #: bytes of the unfinished parts (rows a killed process had not yet closed into a part)
    unfinished_bytes: int = 0
    #: closed parts that could not be read (truncated, damaged): left out, and said so
    bad_parts: list[BadPart] = field(default_factory=list)
    #: why the scraped server metrics could not be read, if they could not
    server_error: str | None = None
    #: warm-up calls of sessions started mid-life (``--start-at mid``): not in ``requests``,
    #: so in no figure
    warmup_rows: int = 0

    def targets(self) -> list[str]:
        named = [t.name for t in self.manifest.targets]
        seen = set(self.requests["target"].to_pylist()) if self.requests.num_rows else set()
        return [t for t in named if t in seen] + sorted(seen - set(named))

    def rows_of(self, target: str) -> pa.Table:
        return f.rows_of(self.requests, target)


def load_run(run_dir: RunLocation) -> LoadedRun:
    """Read a run folder; FileNotFoundError naming it when it is not one."""
    storage = as_storage(run_dir)
    if not storage.exists("manifest.json"):
        raise FileNotFoundError(f"{storage.path('manifest.json')}: no manifest (is this a run directory?)")
    torn = unfinished_parts(storage) if storage.exists("requests") else []
    manifest = RunManifest.read(storage)
    # warm-ups left out as the parts are read: filtered after, the rows were read twice over
    requests, bad = read_requests_tolerant(storage, columns=COLUMNS, rows=NOT_WARMUP)
    warmups = warmup_count(storage, bad)
    server, server_error = None, None
    try:
        server = read_server_metrics(storage)
    except (pa.ArrowException, OSError) as exc:  # the requests matter more: report without them
        server_error = f"{storage.path('server_metrics.parquet')}: {type(exc).__name__}: {exc}"[:400]
    return LoadedRun(
        location=str(storage.path()),
        manifest=manifest,
        requests=requests,
        server=server,
        server_error=server_error,
        unfinished_parts=len(torn),
        unfinished_bytes=sum(part_size(storage, p) for p in torn),
        bad_parts=bad,
        warmup_rows=warmups,
    )


#: Dispatch lag p99 above this says the generator could not keep its schedule (the live view's
#: "late" uses the same bound).
LATE_LAG_P99_MS = LATE_NS / 1e6
#: The words of every warning about it (run log, live view, report, compare).
GENERATOR_BEHIND = "the generator fell behind its schedule"
#: An emulator whose steps take this much longer than its model did not keep the model.
EMULATOR_OVERRUN_LIMIT = 1.2


def lost_worker_warning(mf: RunManifest, w: WorkerInfo, shown_sessions: int = 5) -> str:
    """One sentence on a worker that was lost: where (node), when, and what went with it."""
    where = f" on node {w.node_ip or w.host}" + (f" (id {w.node_id[:12]})" if w.node_id else "")
    when = ""
    if w.lost_at:
        when = f" at {w.lost_at}"
        try:
            into_s = (
                dt.datetime.fromisoformat(w.lost_at) - dt.datetime.fromisoformat(mf.created_at)
            ).total_seconds()
            when += f" ({into_s:.1f} s into the run)"
        except ValueError:
            pass
    ids = w.sessions_cut_ids
    named = ", ".join(ids[:shown_sessions]) + (
        f" and {len(ids) - shown_sessions} more" if len(ids) > shown_sessions else ""
    )
    return (
        f"target {w.target}: worker {w.worker}{where} was lost{when}: {w.sessions_cut} of its "
        f"{w.sessions} sessions cut"
        + (f" ({named})" if named else "")
        + f"; not in the trace: {w.records_lost} of the {w.requests_sent} requests it sent "
        f"(it had handed over {w.requests}); {w.error or 'no error recorded'}"
    )


#: the first warning of a simulated run's report (``swarm simulate``)
SIMULATED_WARNING = (
    "simulated in virtual time (swarm simulate): every figure is the engine twins' model "
    "advanced by a discrete-event clock, not a measurement of a server; a twin calibrated "
    "against an engine carries that calibration's error (docs/simulation.md)"
)


#: how each figure a twin's error is recorded for reads (``sweep.compare.ERROR_FIGURES``)
_ERROR_FIGURE_NAMES = {
    "ttft_ms.p50": "TTFT p50", "ttft_ms.p99": "TTFT p99", "output_tokens_per_s": "out tok/s",
    "e2e_ms.p50": "E2E p50", "tasks.completion_ms.p50": "task p50",
}  # fmt: skip


def twin_error_lines(simulated: dict[str, Any] | None) -> list[str]:
    """For a simulated run or sweep (its manifest's ``simulated``), each calibrated twin's
    measured error against its engine, the error its simulated figures carry; or that a
    calibrated twin was never held against its engine."""
    out: list[str] = []
    for twin in (simulated or {}).get("twins", []):
        calibrated = twin.get("calibrated")
        if calibrated is None:
            continue
        name, engine, path = f"twin-{twin['engine']}", twin["engine"], calibrated.get("calibration")
        errors = calibrated.get("errors")
        if errors is None:
            out.append(
                f"{name} is calibrated ({path}) but was never held against {engine}: the error of its simulated "
                f"figures is not measured (swarm compare ENGINE_SWEEP TWIN_SWEEP --record-error {path})"
            )
            continue
        parts = [f"{label} ±{errors[key]:.1%}" for key, label in _ERROR_FIGURE_NAMES.items() if key in errors]
        if "hit_ratio" in errors:
            parts.append(f"hit ±{errors['hit_ratio']:.2f}")
        cliff = calibrated.get("cliff_steps")
        if cliff is not None:
            parts.append(f"cliff {cliff:+.2f} ladder steps")
        out.append(
            f"{name}'s figures carry its measured error against {engine} (its sweep held against the engine's: "
            f"{calibrated.get('engine_sweep')} vs {calibrated.get('twin_sweep')}, recorded in {path}): "
            + ", ".join(parts)
        )
    return out


def run_warnings(run: LoadedRun, targets: dict[str, TargetReport]) -> list[str]:
    """What a reader of the figures must know first: a run that did not finish, rows lost,
    requests that failed, a generator that fell behind its schedule."""
    mf = run.manifest
    out: list[str] = []
    if mf.simulated is not None:
        out.append(SIMULATED_WARNING)
        out.extend(twin_error_lines(mf.simulated))
    if mf.status.value == "running":
        out.append(
            "the run never finished (its manifest still says running): the process was killed or "
            "crashed; the trace holds what was closed into parts before that"
        )
    elif mf.status.value != "complete":
        out.append(f"run {mf.status.value}: {mf.status_reason or 'no reason recorded'}")
    if run.unfinished_parts:
        out.append(
            f"{run.unfinished_parts} unfinished trace part(s) ({run.unfinished_bytes:,} bytes) are left "
            "out: their writer stopped before closing them, and their rows are lost (at most one flush "
            "interval of requests per writer)"
        )
    if run.bad_parts:
        rows = run.requests.num_rows
        read_bytes = sum(part_size(as_storage(run.location), p) for p in list_parts(run.location)) - sum(
            b.size_bytes for b in run.bad_parts
        )
        per_row = read_bytes / rows if rows and read_bytes > 0 else None
        for b in run.bad_parts:
            estimate = (
                f"about {b.size_bytes / per_row:,.0f} rows (from its size)" if per_row else "rows unknown"
            )
            out.append(
                f"{b.path} ({b.size_bytes:,} bytes) cannot be read and is left out: {estimate}; {b.error}"
            )
        counted = sum(mf.counts.values()) - run.warmup_rows
        if counted > rows:
            out.append(f"the readable parts hold {rows:,} of the {counted:,} requests the manifest counts")
    if run.warmup_rows:
        out.append(
            f"{run.warmup_rows} warm-up calls (sessions started mid-life re-send their history first) "
            "are left out of every figure"
        )
    if run.server_error:
        out.append(f"the engines' scraped metrics cannot be read and are left out: {run.server_error}")
    if mf.records_lost:
        out.append(f"{mf.records_lost} requests were made but could not be written to the trace")
    out += [lost_worker_warning(mf, w) for w in mf.workers if not w.alive]
    out += [f"{info.name}: {why}" for info in mf.targets if (why := info.shortfall()) is not None]
    for name, entry in targets.items():
        fig = entry.figures
        if fig.failed:
            kinds = ", ".join(
                f"{k} {v}" for k, v in fig.errors.by_status.items() if k not in ("ok", "cancelled")
            )
            out.append(f"{name}: {fig.failed} of {fig.requests} requests failed ({kinds})")
        if fig.cancelled:
            out.append(f"{name}: {fig.cancelled} requests in flight were cancelled when the run stopped")
        emu = (entry.server or {}).get("emulator")
        if emu is not None and emu["step_overrun"] > EMULATOR_OVERRUN_LIMIT:
            out.append(
                f"{name}: the emulator could not keep its own model: its steps took "
                f"{emu['step_overrun']:.2f}x their modelled time (the CPU was its limit), so its "
                "latencies describe this machine, not the modelled engine; lower the load or give "
                "the emulator a core of its own"
            )
        flag = m.client_lag_flag(fig.client_lag_ms.p99, fig.ttft_ms.p50)
        if flag is not None:
            out.append(f"{name}: {flag}")
        lag99 = fig.lag_ms.p99
        if lag99 is not None and lag99 > LATE_LAG_P99_MS:
            out.append(
                f"{name}: {GENERATOR_BEHIND}: sends were late by {lag99:.1f} ms at p99 (max "
                f"{fig.lag_ms.max or 0.0:.1f} ms); the load offered was lower than asked (dispatch lag: "
                "queue_ns - slot_wait_ns)"
            )
    return out


def workload_identity(manifest: RunManifest) -> dict[str, Any]:
    """What makes two runs' traffic the same.

    - a swarm run: its seed and traffic hash (``spec_hash``: the spec and the resolved
      contents of its profiles and topologies), paced by its agents (``dependent x1``);
    - a replay of a swarm run: the same, from the run it replays (its manifest carries the
      source's seed and hash), paced by its mode and speed: a dependent replay at speed 1 is
      the same workload as its source run;
    - a replay of a trace file: the source, its format, filters and size, mode and speed.
    """
    r = manifest.replay_of if manifest.kind == "replay" else None
    if r is not None and not (r.get("format") == "swarm" and manifest.spec_hash):
        return {
            "traffic": "trace",
            **{k: r.get(k) for k in ("source", "format", "requests", "filters")},
            "pacing": f"{r.get('mode')} x{r.get('speed'):g}" if r.get("speed") else r.get("mode"),
        }
    pacing = "dependent x1" if r is None else f"{r.get('mode')} x{(r.get('speed') or 1):g}"
    return {
        "traffic": "swarm workload",
        "seed": manifest.seed,
        "spec_hash": manifest.spec_hash,
        "pacing": pacing,
    }


#: Words for the fields of ``workload_identity``, for a refusal a person can read.
IDENTITY_WORDS = {
    "traffic": "kind of traffic",
    "seed": "seed",
    "spec_hash": "workload (spec, profiles and topologies)",
    "pacing": "pacing (replay mode and speed)",
    "source": "source trace",
    "format": "trace format",
    "requests": "requests",
    "filters": "filters",
}


def workload_differences(runs: list[tuple[str, RunManifest]]) -> list[str]:
    """Each field in which the runs' workloads differ, in words, with every run's value; for
    the traffic hash, the profiles and topologies whose contents differ where the manifests
    say."""
    identities = [(name, workload_identity(mf)) for name, mf in runs]
    out: list[str] = []
    for key in dict.fromkeys(k for _, ident in identities for k in ident):
        values = [ident.get(key) for _, ident in identities]
        if all(v == values[0] for v in values):
            continue
        line = f"{IDENTITY_WORDS.get(key, key)}: " + ", ".join(
            f"{name} {value if value is not None else '(none)'}"
            for (name, _), value in zip(identities, values, strict=True)
        )
        if key == "spec_hash":
            digests = [mf.workload_digests for _, mf in runs]
            if all(digests):
                changed = changed_contents(*digests)
                if changed:
                    line += f" ({', '.join(changed)} differ)"
        out.append(line)
    return out


def _fleet(run: LoadedRun, name: str, rows: pa.Table, info: TargetInfo | None) -> FleetFigures | None:
    """The target's fleet figures, where it is one: replicas listed in the manifest, or its
    rows naming two replicas or more (read again with the block hashes and warm-ups)."""
    replicas = info.replicas if info is not None else []
    named = rows["replica"] if "replica" in rows.column_names else None
    if not replicas and (named is None or len(pc.unique(named.drop_null())) < 2):
        return None
    target = pc.field("target") == name  # filtered as read: no copy of the others' block hashes
    table, _ = read_requests_tolerant(as_storage(run.location), columns=FLEET_COLUMNS, rows=target)
    samples = run.server.filter(pc.equal(run.server["target"], name)) if run.server is not None else None
    return fleet_figures(table, samples, replicas, info.replica_names if info is not None else None)


def build_run_report(run: LoadedRun, slo: m.SLO | None = None, *, intervals: bool = True) -> RunReport:
    """Figures per target (``figures.target_figures``), breakdowns by ``BREAKDOWN_KEYS``
    (only keys with more than one value), the engine-side figures where scraped, and with
    ``intervals`` the 95 % interval of each figure that has one (``intervals``: over repeats,
    else sessions)."""
    mf = run.manifest
    engines = {t.name: t for t in mf.targets}
    targets: dict[str, TargetReport] = {}
    for name in run.targets():
        rows = run.rows_of(name)
        info = engines.get(name)
        server = None
        if run.server is not None:
            samples = run.server.filter(pc.equal(run.server["target"], name))
            if samples.num_rows:
                start = int(pc.min(rows["sent_ns"]).as_py()) if rows.num_rows else None
                server = target_figures(samples, start)
        targets[name] = TargetReport(
            engine=info.engine if info else first_engine(rows),
            emulated=bool(info.emulated) if info else False,
            figures=f.target_figures(rows, slo),
            breakdowns={
                key: f.breakdown(rows, key) for key in BREAKDOWN_KEYS if len(m.group_values(rows, key)) > 1
            },
            server=server,
            intervals=target_intervals(rows) if intervals else {},
            fleet=_fleet(run, name, rows, info),
        )
    return RunReport(
        run={
            "run_id": mf.run_id,
            "location": run.location,
            "kind": mf.kind,
            "status": mf.status.value,
            "status_reason": mf.status_reason,
            "created_at": mf.created_at,
            "workload": workload_identity(mf),
            "unfinished_parts": run.unfinished_parts,
            "simulated": mf.simulated,
        },
        slo=slo.describe() if slo is not None else None,
        targets=targets,
        warnings=run_warnings(run, targets),
    )


def build_report(run: LoadedRun, slo: m.SLO | None = None) -> dict[str, Any]:
    """``build_run_report`` in its JSON shape (what ``swarm report --json`` prints)."""
    return build_run_report(run, slo).as_dict()


def without_timelines(report: dict[str, Any]) -> dict[str, Any]:
    """The report less the long per-scrape series (for a compact ``--json``)."""
    out = {**report, "targets": {}}
    for name, entry in report["targets"].items():
        server = entry.get("server")
        if server is not None:
            server = {k: v for k, v in server.items() if k != "cache_timeline"}
            for key in ("queue", "running"):
                if server.get(key):
                    server[key] = {k: v for k, v in server[key].items() if k not in ("t_s", "values")}
        out["targets"][name] = {**entry, "server": server}
    return out
