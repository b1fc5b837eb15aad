"""``swarm report``: every figure of a run, per target, as one JSON-ready dict.

Place in the map (DESIGN.md, "Analysis"): reads a run folder (manifest, request rows, server
metrics) and computes with ``metrics`` and ``server``; the terminal view (``cli_report``), the
HTML page (``html``) and ``--json`` all show this same dict, so they never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from swarm.analysis import metrics as m
from swarm.analysis.server import read_server_metrics, target_figures
from swarm.live_stats import LATE_NS
from swarm.trace.manifest import RunManifest
from swarm.trace.reader import RunLocation, as_storage, read_requests, unfinished_parts

#: Columns a breakdown may be made by, in the order reports show them.
BREAKDOWN_KEYS = ("depth", "role", "profile", "topology", "system_prompt_id")
COLUMNS = [
    "target", "engine", "session_id", "node", "parent_nodes", "depth", "role", "profile", "topology",
    "system_prompt_id", "status", "error", "scheduled_ns", "sent_ns", "queue_ns", "ttft_ns", "e2e_ns",
    "chunk_ns", "prompt_tokens", "completion_tokens", "cached_tokens", "prompt_tokens_est",
    "ideal_cached_tokens_est",
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

    def targets(self) -> list[str]:
        named = [t.name for t in self.manifest.targets]
        seen = set(self.requests["target"].to_pylist()) if self.requests.num_rows else set()
        return [t for t in named if t in seen] + sorted(seen - set(named))

    def rows_of(self, target: str) -> pa.Table:
        return self.requests.filter(pc.equal(self.requests["target"], target))


def load_run(run_dir: RunLocation) -> LoadedRun:
    """Read a run folder; FileNotFoundError naming it when it is not one."""
    storage = as_storage(run_dir)
    if not storage.exists("manifest.json"):
        raise FileNotFoundError(f"{storage.path('manifest.json')}: no manifest (is this a run directory?)")
    torn = unfinished_parts(storage) if storage.exists("requests") else []
    return LoadedRun(
        location=str(storage.path()),
        manifest=RunManifest.read(storage),
        requests=read_requests(storage, columns=COLUMNS),
        server=read_server_metrics(storage),
        unfinished_parts=len(torn),
        unfinished_bytes=sum(_size(storage, p) for p in torn),
    )


def _size(storage: Any, path: Any) -> int:
    try:
        return int(storage.fs.get_file_info(str(path)).size or 0)
    except OSError:
        return 0


#: Client queue p99 above this says the generator could not keep its schedule (the live
#: view's "late" uses the same bound).
LATE_QUEUE_P99_MS = LATE_NS / 1e6


def run_warnings(run: LoadedRun, report: dict[str, Any]) -> list[str]:
    """What a reader of the figures must know first: a run that did not finish, rows lost,
    requests that failed, a generator that fell behind its schedule."""
    mf = run.manifest
    out: list[str] = []
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
    if mf.records_lost:
        out.append(f"{mf.records_lost} requests were made but could not be written to the trace")
    for name, entry in report["targets"].items():
        fig = entry["figures"]
        failed = fig["requests"] - fig["ok"]
        if failed:
            kinds = ", ".join(f"{k} {v}" for k, v in fig["errors"]["by_status"].items() if k != "ok")
            out.append(f"{name}: {failed} of {fig['requests']} requests failed ({kinds})")
        q99 = fig["queue_ms"]["p99"]
        if q99 is not None and q99 > LATE_QUEUE_P99_MS:
            out.append(
                f"{name}: the generator fell behind its schedule: sends were late by {q99:.1f} ms at "
                f"p99 (max {fig['queue_ms']['max']:.1f} ms); the load offered was lower than asked "
                "(queue_ns: sent minus scheduled)"
            )
    return out


def workload_identity(manifest: RunManifest) -> dict[str, Any]:
    """What makes two runs' traffic the same: seed and spec hash for a swarm run; source, mode,
    speed, filters and size for a replay."""
    if manifest.kind == "replay" and manifest.replay_of:
        r = manifest.replay_of
        return {
            "kind": "replay",
            **{k: r.get(k) for k in ("source", "run_id", "format", "mode", "speed", "requests", "filters")},
        }
    return {"kind": manifest.kind, "seed": manifest.seed, "spec_hash": manifest.spec_hash}


def build_report(run: LoadedRun, slo: m.SLO | None = None) -> dict[str, Any]:
    """Figures per target (see ``metrics.summary_figures``), breakdowns by ``BREAKDOWN_KEYS``
    (only keys with more than one value), the engine-side figures where scraped."""
    mf = run.manifest
    engines = {t.name: t for t in mf.targets}
    report: dict[str, Any] = {
        "run": {
            "run_id": mf.run_id,
            "location": run.location,
            "kind": mf.kind,
            "status": mf.status.value,
            "status_reason": mf.status_reason,
            "created_at": mf.created_at,
            "workload": workload_identity(mf),
            "unfinished_parts": run.unfinished_parts,
        },
        "slo": slo.describe() if slo is not None else None,
        "targets": {},
    }
    for name in run.targets():
        rows = run.rows_of(name)
        info = engines.get(name)
        entry: dict[str, Any] = {
            "engine": info.engine if info else (rows["engine"][0].as_py() if rows.num_rows else ""),
            "emulated": bool(info.emulated) if info else False,
            "figures": m.summary_figures(rows, slo),
            "breakdowns": {},
            "server": None,
        }
        for key in BREAKDOWN_KEYS:
            if len(m.group_values(rows, key)) > 1:
                entry["breakdowns"][key] = m.breakdown(rows, key)
        if run.server is not None:
            samples = run.server.filter(pc.equal(run.server["target"], name))
            if samples.num_rows:
                start = int(pc.min(rows["sent_ns"]).as_py()) if rows.num_rows else None
                entry["server"] = target_figures(samples, start)
        report["targets"][name] = entry
    report["warnings"] = run_warnings(run, report)
    return report


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
