"""Engine-side figures from ``server_metrics.parquet``, beside the client's view.

Place in the map (docs/architecture.md, "Analysis"): reads the samples the run scraped from each target's
Prometheus endpoint (see ``swarm.runtime.metrics_scraper`` for the file) and derives, per target:

- ``cache_hit_ratio``: from counters, Δ hits / Δ queries between the first and the last scrape
  (SGLang ``sglang:cached_tokens_total`` / ``sglang:prompt_tokens_total``; vLLM
  ``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total``; llama.cpp
  ``llamacpp:prompt_tokens_cached_total`` / (that + ``llamacpp:prompt_tokens_total``, which
  counts computed tokens only)); where the engine
  only has a gauge (TensorRT-LLM ``trtllm_kv_cache_hit_rate``), its last value
- ``queue``: the waiting-requests gauge (``sglang:num_queue_reqs``,
  ``vllm:num_requests_waiting``, ``trtllm_num_requests_waiting``,
  ``llamacpp:requests_deferred``): mean and max over scrapes, and its timeline
- ``running``: the running-requests gauge, likewise
- ``window_means``: KV usage, queue and running gauges averaged over a window (sweeps)
- ``emulator``: for swarm's emulator only, whether it kept its step-time model
  (``emulator_figures``)

Series of several label sets are summed (a counter's last value carried forward to the scrapes
that lack it, its first back: a fleet's replica that stopped answering keeps its count). Names come from the engine modules (``swarm/engines/``,
each series by what it means), matched as the engines publish them, so a file from any engine
that uses one of these names is understood.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from swarm.engines import emulated
from swarm.engines.engine import MetricMeaning
from swarm.engines.registry import ENGINES
from swarm.trace.reader import RunLocation, as_storage

FILE_NAME = "server_metrics.parquet"


def _cache_counters() -> tuple[tuple[str, str, bool], ...]:
    """(hits, queries, whether the queries include the hits) per engine that has both: its
    prefix-cache queries, else its prompt tokens, else (llama.cpp) the prompt tokens it computed,
    to which the hits are added."""
    out = []
    for e in ENGINES.values():
        hits = e.metric("cached_tokens")
        queries = e.metric("prefix_queries") or e.metric("prompt_tokens")
        computed = e.metric("computed_prompt_tokens")
        if hits is not None and queries is not None:
            out.append((hits.name, queries.name, True))
        elif hits is not None and computed is not None:
            out.append((hits.name, computed.name, False))
    return tuple(out)


def _names(meaning: MetricMeaning) -> tuple[str, ...]:
    return tuple(n for e in ENGINES.values() for n in e.names_of(meaning))


CACHE_COUNTERS = _cache_counters()
#: engines that publish only a hit-rate gauge (TensorRT-LLM)
CACHE_GAUGES = tuple(
    n for e in ENGINES.values() if e.metric("cached_tokens") is None for n in e.names_of("cache_hit_rate")
)
QUEUE_GAUGES = _names("waiting")
#: share of the KV cache in use (SGLang's token usage, TensorRT-LLM's utilization, vLLM, llama.cpp)
KV_USAGE_GAUGES = _names("kv_usage")
#: swarm's emulator only: how full its prefix cache is (its KV gauge counts running sequences)
CACHE_USAGE_GAUGES = (emulated.PREFIX_CACHE_USAGE,)
RUNNING_GAUGES = _names("running")


def read_server_metrics(run_dir: RunLocation) -> pa.Table | None:
    """The run's scraped samples, or None when the run has none."""
    storage = as_storage(run_dir)
    if not storage.exists(FILE_NAME):
        return None
    with storage.fs.open_input_file(storage.path(FILE_NAME)) as f:
        return pq.read_table(f)


def _series(table: pa.Table, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(scrape times ns, value summed over label sets) of one metric, in time order."""
    rows = table.filter(pc.equal(table["metric"], metric))
    if rows.num_rows == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    t = rows["t_ns"].to_numpy()
    v = rows["value"].to_numpy()
    times, inverse = np.unique(t, return_inverse=True)
    return times, np.bincount(inverse, weights=v)


def _counter_series(table: pa.Table, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """A counter's (scrape times ns, value summed over label sets), each label set's last value
    carried forward to the scrapes that lack it (a fleet's replica that stopped answering: its
    count so far still counts), and its first value back to the scrapes before it (one that
    answered late: only what it counted from then on is a change)."""
    rows = table.filter(pc.equal(table["metric"], metric))
    if rows.num_rows == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    t = rows["t_ns"].to_numpy()
    v = rows["value"].to_numpy()
    times, at = np.unique(t, return_inverse=True)
    labels, of = np.unique(np.asarray(rows["labels"].to_pylist(), dtype=object), return_inverse=True)
    grid = np.full((labels.size, times.size), np.nan)
    grid[of, at] = v
    for row in grid:  # carry each series' last value forward
        seen = ~np.isnan(row)
        if seen.any():
            index = np.where(seen, np.arange(row.size), 0)
            np.maximum.accumulate(index, out=index)
            filled = row[index]
            first = int(np.argmax(seen))
            filled[:first] = row[first]
            row[:] = filled
    return times, np.nan_to_num(grid).sum(axis=0)


def _first_present(table: pa.Table, names: tuple[str, ...]) -> str | None:
    present = set(pc.unique(table["metric"]).to_pylist())
    return next((n for n in names if n in present), None)


def _cache_counters_of(table: pa.Table) -> tuple[str, np.ndarray, np.ndarray, np.ndarray] | None:
    """The first of ``CACHE_COUNTERS`` the samples have, scraped together at least twice: (its
    source in words, scrape times, cached prompt tokens, prompt tokens with the hits in)."""
    for hits_name, queries_name, includes_hits in CACHE_COUNTERS:
        th, hits = _counter_series(table, hits_name)
        tq, queries = _counter_series(table, queries_name)
        if hits.size >= 2 and tq.size == th.size and np.array_equal(th, tq):
            return f"{hits_name} / {queries_name}", th, hits, queries if includes_hits else queries + hits
    return None


def cache_token_deltas(table: pa.Table) -> tuple[float, float] | None:
    """(Δ cached prompt tokens, Δ prompt tokens) between the first and the last scrape, by the
    first of ``CACHE_COUNTERS`` the samples have (None: no such pair, or one scrape)."""
    found = _cache_counters_of(table)
    if found is None:
        return None
    _, _, hits, queries = found
    return float(hits[-1] - hits[0]), float(queries[-1] - queries[0])


def target_figures(table: pa.Table, start_ns: int | None = None) -> dict[str, Any]:
    """The figures above for one target's samples; timelines in seconds from ``start_ns``
    (default: the first scrape)."""
    out: dict[str, Any] = {"scrapes": int(pc.count_distinct(table["t_ns"]).as_py() or 0)}
    origin = (
        start_ns if start_ns is not None else (int(pc.min(table["t_ns"]).as_py()) if table.num_rows else 0)
    )
    out["cache_hit_ratio"] = None
    out["cache_source"] = None
    out["cache_timeline"] = {"t_s": [], "hit_ratio": []}
    if (found := _cache_counters_of(table)) is not None:
        source, th, hits, queries = found
        d_hits, d_queries = np.diff(hits), np.diff(queries)
        total = float(queries[-1] - queries[0])
        out["cache_hit_ratio"] = float(hits[-1] - hits[0]) / total if total > 0 else None
        out["cache_source"] = source
        valid = d_queries > 0
        out["cache_timeline"] = {
            "t_s": ((th[1:][valid] - origin) / 1e9).tolist(),
            "hit_ratio": (d_hits[valid] / d_queries[valid]).tolist(),
        }
    if out["cache_source"] is None and (gauge := _first_present(table, CACHE_GAUGES)) is not None:
        t, v = _series(table, gauge)
        out["cache_hit_ratio"] = float(v[-1])
        out["cache_source"] = gauge
        out["cache_timeline"] = {"t_s": ((t - origin) / 1e9).tolist(), "hit_ratio": v.tolist()}
    out["emulator"] = emulator_figures(table)
    for key, names in (("queue", QUEUE_GAUGES), ("running", RUNNING_GAUGES)):
        name = _first_present(table, names)
        if name is None:
            out[key] = None
            continue
        t, v = _series(table, name)
        out[key] = {
            "metric": name,
            "mean": float(v.mean()),
            "max": float(v.max()),
            "t_s": ((t - origin) / 1e9).tolist(),
            "values": v.tolist(),
        }
    return out


def window_means(table: pa.Table, start_ns: int, end_ns: int) -> dict[str, Any]:
    """Gauges averaged over the scrapes in ``[start_ns, end_ns]`` (wall clock): ``kv_usage``
    (share of the KV cache in use), ``cache_usage`` (the emulator's prefix cache, full share),
    ``queue`` and ``running`` (requests), each the plain mean
    of its samples there (scrapes are evenly spaced), None where the engine has no such gauge or
    no scrape fell in the window; ``*_metric`` names the gauge read."""
    out: dict[str, Any] = {}
    for key, names in (
        ("kv_usage", KV_USAGE_GAUGES), ("cache_usage", CACHE_USAGE_GAUGES), ("queue", QUEUE_GAUGES),
        ("running", RUNNING_GAUGES),
    ):  # fmt: skip
        name = _first_present(table, names) if table.num_rows else None
        out[key], out[f"{key}_metric"] = None, name
        if name is None:
            continue
        t, v = _series(table, name)
        inside = (t >= start_ns) & (t <= end_ns)
        if inside.any():
            out[key] = float(v[inside].mean())
    return out


def _delta(table: pa.Table, metric: str) -> float | None:
    """Last minus first scrape of a counter; None with fewer than two scrapes."""
    _, values = _counter_series(table, metric)
    return float(values[-1] - values[0]) if values.size >= 2 else None


def emulator_figures(table: pa.Table) -> dict[str, Any] | None:
    """Whether swarm's emulator kept its own step-time model, from its ``swarm_emulator_*``
    counters between the first and the last scrape (None for a real engine, or no steps):

    - ``step_overrun``: Δ actual step seconds / Δ modelled step seconds (1.0: kept its model)
    - ``model_itl_ms``: Δ Σ(per token after a request's first, the modelled time since its previous token) / Δ such tokens,
      x 1000: the inter-token latency the model gives, averaged over tokens as a client sees
      them (first tokens belong to TTFT)
    - ``steps``: Δ steps
    """
    steps = _delta(table, emulated.STEPS)
    model_s = _delta(table, emulated.STEP_MODEL_SECONDS)
    actual_s = _delta(table, emulated.STEP_SECONDS)
    tokens = _delta(table, emulated.STEP_TOKENS)
    token_model_s = _delta(table, emulated.STEP_TOKEN_MODEL_SECONDS)
    if not steps or not model_s or actual_s is None:
        return None
    return {
        "steps": int(steps),
        "step_overrun": actual_s / model_s,
        "model_itl_ms": 1000 * token_model_s / tokens if tokens and token_model_s is not None else None,
    }


def server_figures(
    run_dir: RunLocation, starts_ns: dict[str, int] | None = None
) -> dict[str, dict[str, Any]]:
    """``target_figures`` per target of a run; empty when the run scraped nothing."""
    table = read_server_metrics(run_dir)
    if table is None:
        return {}
    out = {}
    for target in sorted(set(table["target"].to_pylist())):
        rows = table.filter(pc.equal(table["target"], target))
        out[target] = target_figures(rows, (starts_ns or {}).get(target))
    return out
