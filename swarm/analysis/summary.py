"""The end-of-run summary per target, computed from the trace.

Place in the map (docs/architecture.md, "Analysis"): the short table ``swarm run`` prints at the end.
Every figure is computed from the Parquet rows, with exact percentiles:

- requests, ok, cancelled (rows cut short by the run's own stop: Ctrl-C, a halt), errors
  (rows neither ``ok`` nor ``cancelled``), agents (distinct ``session_id``)
- TTFT p50 / p99: percentiles of ``ttft_ns`` over ok rows
- ITL p50 / p99: percentiles of consecutive differences of ``chunk_ns`` over ok rows
- output tokens/s: sum of ``completion_tokens`` / (last ``sent_ns + e2e_ns`` - first ``sent_ns``)
- cache hit ratio: sum ``cached_tokens`` / sum ``prompt_tokens`` over ok rows that report both
- ideal hit ratio: sum ``ideal_cached_tokens_est`` / sum ``prompt_tokens_est`` over the same rows
- lag p99: 99th percentile of the dispatch lag ``queue_ns - slot_wait_ns`` (how late the
  generator itself sent requests; a wait for a free slot under the in-flight cap is the load
  asked for, not lateness; a null ``slot_wait_ns``, from an older trace, counts as 0)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from swarm.analysis import metrics as m
from swarm.trace.reader import RunLocation, read_requests

COLUMNS = [
    "target", "engine", "session_id", "status", "ttft_ns", "e2e_ns", "sent_ns", "queue_ns", "slot_wait_ns",
    "chunk_ns",
    "prompt_tokens", "completion_tokens", "cached_tokens", "prompt_tokens_est", "ideal_cached_tokens_est",
]  # fmt: skip


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def _itl_ns(chunks: pa.ChunkedArray) -> np.ndarray:
    """Differences between consecutive chunk offsets within each row, all rows together."""
    out = []
    for chunk in chunks.chunks:
        lengths = pc.fill_null(pc.list_value_length(chunk), 0).to_numpy()
        flat = chunk.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
        if flat.size < 2:
            continue
        diffs = np.diff(flat)
        ends = np.cumsum(lengths)[:-1] - 1  # last index of each row but the final one
        mask = np.ones(diffs.size, dtype=bool)
        mask[ends[(ends >= 0) & (ends < diffs.size)]] = False
        out.append(diffs[mask])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def summarize_table(table: pa.Table) -> dict[str, Any]:
    ok = table.filter(pc.equal(table["status"], "ok"))
    ttft = ok["ttft_ns"].drop_null().to_numpy().astype(np.float64)
    itl = _itl_ns(ok["chunk_ns"]).astype(np.float64)
    reported = ok.filter(pc.and_(pc.is_valid(ok["cached_tokens"]), pc.is_valid(ok["prompt_tokens"])))
    prompt = pc.sum(reported["prompt_tokens"]).as_py() or 0
    cached = pc.sum(reported["cached_tokens"]).as_py() or 0
    est = reported.filter(pc.is_valid(reported["ideal_cached_tokens_est"]))
    est_prompt = pc.sum(est["prompt_tokens_est"]).as_py() or 0
    est_cached = pc.sum(est["ideal_cached_tokens_est"]).as_py() or 0
    completion = pc.sum(ok["completion_tokens"]).as_py() or 0
    duration_s = None
    if table.num_rows:
        start = pc.min(table["sent_ns"]).as_py()
        ends = pc.add(table["sent_ns"], pc.fill_null(table["e2e_ns"], 0))
        duration_s = (pc.max(ends).as_py() - start) / 1e9
    lag = m.lag_ms(table)
    statuses = table["status"].value_counts().to_pylist()
    cancelled = pc.sum(pc.equal(table["status"], "cancelled")).as_py() or 0
    return {
        "requests": table.num_rows,
        "ok": ok.num_rows,
        "cancelled": cancelled,
        "errors": table.num_rows - ok.num_rows - cancelled,
        "by_status": {d["values"]: d["counts"] for d in statuses},
        "agents": pc.count_distinct(table["session_id"]).as_py() if table.num_rows else 0,
        "duration_s": duration_s,
        "ttft_p50_ms": None if (v := _pct(ttft, 50)) is None else v / 1e6,
        "ttft_p99_ms": None if (v := _pct(ttft, 99)) is None else v / 1e6,
        "itl_p50_ms": None if (v := _pct(itl, 50)) is None else v / 1e6,
        "itl_p99_ms": None if (v := _pct(itl, 99)) is None else v / 1e6,
        "lag_p99_ms": _pct(lag, 99),
        "output_tokens_per_s": completion / duration_s if duration_s else None,
        "cache_hit_ratio": cached / prompt if prompt else None,
        "ideal_hit_ratio": est_cached / est_prompt if est_prompt else None,
    }


def summarize_run(run_dir: RunLocation) -> dict[str, dict[str, Any]]:
    """Summary per target of a run directory."""
    table = read_requests(run_dir, columns=COLUMNS)
    out: dict[str, dict[str, Any]] = {}
    for target in sorted(set(table["target"].to_pylist())):
        rows = table.filter(pc.equal(table["target"], target))
        summary = summarize_table(rows)
        summary["engine"] = rows["engine"][0].as_py() if rows.num_rows else ""
        out[target] = summary
    return out
