"""The end-of-run summary per target: a short view of the typed figures.

Place in the map (docs/architecture.md, "Analysis"): the short table ``swarm run`` and ``swarm
replay`` print at the end, and their ``--json``. Nothing is computed here: each target's
figures come from ``figures.target_figures`` (formulas in ``metrics``), the same objects
``swarm report`` and ``swarm compare`` show; this module picks the few that the summary
shows, under its own JSON keys:

- requests, ok, cancelled, errors (``TargetFigures.failed``: neither ``ok`` nor
  ``cancelled``), by_status, agents (``metrics.session_ids``)
- duration_s: the span (``metrics.span_s``; 0.0 for rows whose span is nil)
- ttft / itl p50 and p99, lag p99 (the dispatch lag ``queue_ns - slot_wait_ns``), and
  ``client_lag`` p50 / p99 / max (``metrics.client_lag_ms``: the client behind the kernel's
  receive stamps; None where the reads were timed in user space)
- output_tokens_per_s, cache_hit_ratio, ideal_hit_ratio
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from swarm.analysis.figures import TargetFigures, first_engine, rows_of, target_figures, target_names
from swarm.analysis.metrics import PIECE_ROWS, Batches
from swarm.trace.reader import (
    WARMUP_COLUMN,
    RunLocation,
    read_requests,
    request_batches,
    rows_kept,
    without_warmups,
)

#: the columns read into one table: one value a row
COLUMNS = [
    "target", "engine", "session_id", "status", "ttft_ns", "e2e_ns", "sent_ns", "queue_ns", "slot_wait_ns",
    "prompt_tokens", "completion_tokens", "cached_tokens", "prompt_tokens_est", "ideal_cached_tokens_est",
    "repeat", "clock",
]  # fmt: skip


def closing_summary(fig: TargetFigures, engine: str) -> dict[str, Any]:
    """The summary's JSON shape of one target's figures (the keys ``swarm run --json`` has)."""
    duration_s = fig.span_s if fig.span_s is not None else (0.0 if fig.requests else None)
    return {
        "requests": fig.requests,
        "ok": fig.ok,
        "cancelled": fig.cancelled,
        "errors": fig.failed,
        "by_status": dict(fig.errors.by_status),
        "agents": fig.agents,
        "duration_s": duration_s,
        "ttft_p50_ms": fig.ttft_ms.p50,
        "ttft_p99_ms": fig.ttft_ms.p99,
        "itl_p50_ms": fig.itl_ms.p50,
        "itl_p99_ms": fig.itl_ms.p99,
        "lag_p99_ms": fig.lag_ms.p99,
        "client_lag": {"p50_ms": fig.client_lag_ms.p50, "p99_ms": fig.client_lag_ms.p99, "max_ms": fig.client_lag_ms.max},
        "output_tokens_per_s": fig.throughput.output_tokens_per_s,
        "cache_hit_ratio": fig.cache.hit_ratio,
        "ideal_hit_ratio": fig.cache.ideal_hit_ratio,
        "engine": engine,
    }


def run_figures(run_dir: RunLocation) -> dict[str, tuple[str, TargetFigures]]:
    """(engine, figures) per target of a run folder, targets sorted by name. The figures over
    every chunk (``chunk_ns``, ``chunk_lag_ns``) read them from the trace's files a piece at a
    time (``target_chunks``), a pass or two each: a simulated fleet run's 82 million chunk
    times, read into one table and copied less its warm-ups, had doubled the process's
    memory at its end."""
    table, _warmups = without_warmups(read_requests(run_dir, columns=[*COLUMNS, WARMUP_COLUMN]))
    out: dict[str, tuple[str, TargetFigures]] = {}
    for target in target_names(table):
        rows = rows_of(table, target)
        out[target] = (first_engine(rows), target_figures(rows, chunks=target_chunks(run_dir, target)))
    return out


def target_chunks(run_dir: RunLocation, target: str) -> Batches:
    """``target``'s rows less warm-ups, read again from the run's files at each call, a piece of
    ``PIECE_ROWS`` rows at a time: the rows (in their order) of ``rows_of(without_warmups(
    read_requests(run_dir)), target)``."""

    def batches(columns: list[str]) -> Iterator[pa.RecordBatch]:
        read = request_batches(run_dir, [*columns, "target", WARMUP_COLUMN], PIECE_ROWS, target=target)
        return _kept(read, target)

    return batches


def _kept(batches: Iterable[pa.RecordBatch], target: str) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        warmup = pc.fill_null(batch[WARMUP_COLUMN], False)
        kept = rows_kept(batch, pc.and_kleene(pc.equal(batch["target"], target), pc.invert(warmup)))
        if kept.num_rows:
            yield kept


def summarize_run(run_dir: RunLocation) -> dict[str, dict[str, Any]]:
    """Summary per target of a run directory (``closing_summary`` of its figures)."""
    return {name: closing_summary(fig, engine) for name, (engine, fig) in run_figures(run_dir).items()}
