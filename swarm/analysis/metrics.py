"""Metrics computed from trace rows only, each with its formula.

Place in the map (docs/architecture.md, "Analysis"): functions from a table of request rows (the trace
schema, or any subset of its columns that a function names) to numbers. Nothing here looks at
a live run. Times in the trace are nanoseconds; results are in the unit their name says.

Conventions that every function shares:

- "ok rows": rows whose ``status`` is ``ok``. Latency metrics use ok rows only; error rates
  and the client's queue delay use every row.
- The span of a table is from its first ``sent_ns`` to its last answer end (``sent_ns +
  e2e_ns``, or ``sent_ns`` for a row without ``e2e_ns``).
- Percentiles are exact, from the raw values: numpy's linear interpolation between the two
  nearest ranks (p50, p90, p95, p99, p99.9), and the true maximum.
- Figures over every chunk (ITL, tokens per window) read ``chunk_ns`` a piece of
  ``PIECE_ROWS`` rows at a time (``_chunk_pieces``): a large run's trace holds millions of
  chunk times, and copies of the whole column (the ok rows', flattened, their differences)
  were seven times its size at the end of a run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from swarm.trace.reader import rows_kept

PERCENTILES: tuple[float, ...] = (50, 90, 95, 99, 99.9)
#: rows of a table read at a time by the figures over every chunk (``_chunk_pieces``)
PIECE_ROWS = 1024

Batches = Callable[[list[str]], Iterable[pa.RecordBatch]]
"""A table's rows again, in order, a piece at a time, with (at least) the columns asked for:
how the figures over every chunk read them (``table_batches``; the closing summary gives
them read from the trace's files, ``summary``, where no table holds every chunk)."""


def table_batches(table: pa.Table) -> Batches:
    """``table``'s rows ``PIECE_ROWS`` at a time, with the columns asked for that it has."""
    return lambda columns: table.select([c for c in columns if c in table.column_names]).to_batches(
        max_chunksize=PIECE_ROWS
    )


def distribution(values: np.ndarray | Sequence[float], *, scratch: bool = False) -> dict[str, float | int | None]:
    """``count``, ``mean``, exact percentiles ``p50 … p99.9`` and ``max`` of ``values``.
    ``scratch``: ``values`` is the caller's to lose (a float64 array made for this call): the
    percentiles reorder it in place rather than sort a copy (a run's ITLs are millions)."""
    arr = np.asarray(values, dtype=np.float64)
    out: dict[str, float | int | None] = {"count": int(arr.size)}
    if arr.size == 0:
        out.update({"mean": None, **{percentile_key(q): None for q in PERCENTILES}, "max": None})
        return out
    out["mean"] = float(arr.mean())
    most = float(arr.max())  # before the percentiles may reorder it
    for q, v in zip(PERCENTILES, np.percentile(arr, PERCENTILES, overwrite_input=scratch), strict=True):
        out[percentile_key(q)] = float(v)
    out["max"] = most
    return out


def percentile_key(q: float) -> str:
    """A percentile's key in ``distribution``'s dict: ``p50``, ``p99.9``."""
    return f"p{q:g}"


def numeric(table: pa.Table | pa.RecordBatch, name: str) -> np.ndarray:
    """A numeric column as float64, nulls as NaN."""
    col = table[name]
    return np.asarray(pc.fill_null(pc.cast(col, pa.float64()), np.nan).to_numpy(), dtype=np.float64)



def ok_rows(table: pa.Table) -> pa.Table:
    return table.filter(pc.equal(table["status"], "ok"))


def ok_mask(table: pa.Table) -> np.ndarray:
    """Per row, whether it is ok (the rows ``ok_rows`` keeps)."""
    ok = pc.fill_null(pc.equal(table["status"], "ok"), False)
    return np.asarray(ok.to_numpy(zero_copy_only=False), dtype=bool)


def ok_values(table: pa.Table, name: str) -> np.ndarray:
    """``numeric(ok_rows(table), name)`` without copying the ok rows (every column of them,
    chunk lists included): the column's values at the ok rows, in order."""
    return numeric(table, name)[ok_mask(table)]


def ok_columns(table: pa.Table, *names: str) -> tuple[np.ndarray, ...]:
    """``ok_values`` of each of ``names``, the ok rows found once."""
    ok = ok_mask(table)
    return tuple(numeric(table, n)[ok] for n in names)


def ok_count(table: pa.Table) -> int:
    """How many rows are ok: ``ok_rows(table).num_rows`` without the copy."""
    return int(ok_mask(table).sum())


def ttft_ms(table: pa.Table) -> np.ndarray:
    """Time to first token per ok row: ``ttft_ns / 1e6`` (rows without one are left out)."""
    v = ok_values(table, "ttft_ns")
    return v[~np.isnan(v)] / 1e6


def e2e_ms(table: pa.Table) -> np.ndarray:
    """End-to-end latency per ok row: ``e2e_ns / 1e6`` (sent to the last byte of the answer)."""
    v = ok_values(table, "e2e_ns")
    return v[~np.isnan(v)] / 1e6


def present_ok(table: pa.Table, column: str) -> np.ndarray:
    """Per row, 1 where it is ok and has ``column`` (the rows ``ttft_ms`` and ``e2e_ms`` read,
    one value each), else 0: how many values such a figure takes from each row."""
    return (ok_mask(table) & ~np.isnan(numeric(table, column))).astype(np.int64)


def queue_ms(table: pa.Table) -> np.ndarray:
    """The delay of each send, every status: ``queue_ns / 1e6`` (sent − scheduled), whatever
    its cause (a wait for the in-flight cap, or the generator falling behind)."""
    return numeric(table, "queue_ns") / 1e6


def slot_wait_ms(table: pa.Table) -> np.ndarray:
    """Per row, the part of ``queue_ns`` spent waiting for a free slot under the in-flight cap:
    ``slot_wait_ns / 1e6`` (null, in a trace older than the column: 0)."""
    if "slot_wait_ns" not in table.column_names:
        return np.zeros(table.num_rows)
    return np.nan_to_num(numeric(table, "slot_wait_ns")) / 1e6


def lag_ms(table: pa.Table) -> np.ndarray:
    """The dispatch lag per row, every status: ``(queue_ns − slot_wait_ns) / 1e6``, how late
    the generator itself sent a request; above ``live_stats.LATE_NS`` the generator was behind
    its schedule (waiting for the cap is the load asked for, not lateness)."""
    return queue_ms(table) - slot_wait_ms(table)


#: ``client_lag_ms`` p99 above this share of TTFT p50 flags a target's figures: the client read
#: late enough to matter (the issue of the kernel stamps: 5 %) ...
CLIENT_LAG_SHARE = 0.05
#: ... and above this many ms (a zero-delay server's TTFT of 0.3 ms would flag a lag of 20 us)
CLIENT_LAG_FLOOR_MS = 1.0


def client_lag_ms(table: pa.Table) -> np.ndarray:
    """The client's own lag per content event of the ok rows whose reads the kernel stamped:
    every entry of ``chunk_lag_ns / 1e6`` (the user-space time of the read that carried the event
    minus its kernel receive stamp; a null entry, which swarm's client never writes, is left
    out). Empty for a trace timed in user space (``clock`` ``user``, or older than the column):
    there the lag is in the latencies themselves, unmeasured."""
    pieces = list(client_lag_ns_pieces(table_batches(table)(CLIENT_LAG_COLUMNS)))
    return np.concatenate(pieces).astype(np.float64) / 1e6 if pieces else np.zeros(0)


#: the columns ``client_lag_ns_pieces`` reads
CLIENT_LAG_COLUMNS = ["status", "chunk_lag_ns"]


def client_lag_ns_pieces(batches: Iterable[pa.RecordBatch]) -> Iterator[np.ndarray]:
    """``client_lag_ms``'s values in nanoseconds (int64), a piece of rows at a time, in order:
    each piece's ok rows' ``chunk_lag_ns`` entries (none from rows without the column)."""
    for batch in batches:
        if "chunk_lag_ns" not in batch.schema.names:
            return
        ok = batch.filter(pc.equal(batch["status"], "ok"))
        if ok.num_rows:
            flat = pc.drop_null(pc.list_flatten(ok["chunk_lag_ns"]))
            if len(flat):
                yield flat.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def clocks(table: pa.Table) -> dict[str, int]:
    """Rows per ``clock`` (which clock timed them: ``kernel``, ``user``, ``mixed``; a trace older
    than the column counts as ``user``)."""
    if "clock" not in table.column_names:
        return {"user": table.num_rows} if table.num_rows else {}
    counts = pc.value_counts(pc.fill_null(table["clock"], "user")).to_pylist()
    return {c["values"]: int(c["counts"]) for c in counts}


def client_lag_flag(lag_p99_ms: float | None, ttft_p50_ms: float | None) -> str | None:
    """Why a target's figures are flagged for the client's own lag, or None: its p99 above
    ``CLIENT_LAG_SHARE`` of TTFT p50 and above ``CLIENT_LAG_FLOOR_MS``."""
    if lag_p99_ms is None or not ttft_p50_ms or lag_p99_ms <= max(CLIENT_LAG_SHARE * ttft_p50_ms, CLIENT_LAG_FLOOR_MS):
        return None
    return (
        f"the client read {lag_p99_ms:.1f} ms behind the kernel's receive stamps at p99, "
        f"{lag_p99_ms / ttft_p50_ms:.0%} of TTFT p50 ({ttft_p50_ms:.1f} ms; bound "
        f"{CLIENT_LAG_SHARE:.0%}): TTFT keeps its own stamp, but events read together share the "
        "last one's (ITL), and a late read delays the turns that follow"
    )


def _flat_and_offsets(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A ``chunk_ns`` array's times flattened (read in place where Arrow allows) and the start
    offset of each row in them (n+1; a null list has none)."""
    lengths = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    flat = pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return flat, offsets


def _chunk_pieces(
    batches: Iterable[pa.RecordBatch], *, ok_only: bool
) -> Iterator[tuple[pa.RecordBatch, np.ndarray, np.ndarray]]:
    """Pieces of rows (a table's ``PIECE_ROWS`` at a time: ``table_batches``), in order (their
    ok rows only, with ``ok_only``: a copy of each piece's): each piece's rows, and
    ``_flat_and_offsets`` of their ``chunk_ns``. What a figure over every chunk holds is then
    one piece's chunks besides its result."""
    for batch in batches:
        if ok_only:
            batch = rows_kept(batch, pc.equal(batch["status"], "ok"))
        if batch.num_rows:
            flat, offsets = _flat_and_offsets(batch["chunk_ns"])
            yield batch, flat, offsets


def itl_ms(table: pa.Table) -> np.ndarray:
    """Inter-token latencies of the ok rows: every difference ``chunk_ns[i+1] − chunk_ns[i]``
    within a row (a chunk is one network read that carried generated text), ``/ 1e6``; in row
    order, a piece of the table at a time (``itl_ns_pieces``) into one array."""
    out = np.empty(int(itl_counts(table).sum()), dtype=np.float64)
    at = 0
    for kept in itl_ns_pieces(table_batches(table)(ITL_COLUMNS)):
        np.divide(kept, 1e6, out=out[at : at + kept.size])
        at += kept.size
    return out


#: the columns ``itl_ns_pieces`` reads
ITL_COLUMNS = ["status", "chunk_ns"]


def itl_ns_pieces(batches: Iterable[pa.RecordBatch]) -> Iterator[np.ndarray]:
    """``itl_ms``'s values in nanoseconds (int64), a piece of rows at a time, in order."""
    for _, flat, offsets in _chunk_pieces(batches, ok_only=True):
        if flat.size < 2:
            continue
        diffs = np.diff(flat)
        keep = np.ones(diffs.size, dtype=bool)
        row_ends = offsets[1:-1] - 1  # index of each row's last chunk, but the final row's
        row_ends = row_ends[(row_ends >= 0) & (row_ends < diffs.size)]
        keep[row_ends] = False  # the step from one row's last chunk to the next row's first
        yield diffs[keep]


def itl_counts(table: pa.Table) -> np.ndarray:
    """Per row, how many inter-token latencies ``itl_ms`` takes from it: ``len(chunk_ns) − 1``
    for an ok row with a chunk, else 0."""
    lengths = pc.fill_null(pc.list_value_length(table["chunk_ns"]), 0).to_numpy(zero_copy_only=False)
    return np.where(ok_mask(table), np.maximum(lengths - 1, 0), 0).astype(np.int64)


def mean_itl_ms_per_row(table: pa.Table) -> np.ndarray:
    """Per row: ``(chunk_ns[-1] − chunk_ns[0]) / (len(chunk_ns) − 1) / 1e6``; NaN for a row
    with fewer than two chunks."""
    out = np.full(table.num_rows, np.nan)
    at = 0
    for batch, flat, offsets in _chunk_pieces(table_batches(table)(["chunk_ns"]), ok_only=False):
        n = offsets[1:] - offsets[:-1]
        multi = n >= 2
        piece = out[at : at + batch.num_rows]
        piece[multi] = (flat[offsets[1:][multi] - 1] - flat[offsets[:-1][multi]]) / (n[multi] - 1) / 1e6
        at += batch.num_rows
    return out


def tpot_ms(table: pa.Table) -> np.ndarray:
    """Time per output token of ok rows with at least two tokens:
    ``(e2e_ns − ttft_ns) / (completion_tokens − 1) / 1e6``."""
    e2e, ttft, tokens = ok_columns(table, "e2e_ns", "ttft_ns", "completion_tokens")
    valid = ~np.isnan(e2e) & ~np.isnan(ttft) & (tokens >= 2)
    return (e2e[valid] - ttft[valid]) / (tokens[valid] - 1) / 1e6


def first_sent_ns(table: pa.Table) -> int:
    """The table's first ``sent_ns`` (the origin of the relative times below)."""
    return int(pc.min(table["sent_ns"]).as_py())


def _sent_rel_ns(table: pa.Table | pa.RecordBatch, origin: int) -> np.ndarray:
    """``sent_ns − origin`` as float64. (Wall-clock nanoseconds are above 2**53, where float64
    loses precision, so the origin is subtracted in integers first.)"""
    sent = np.asarray(table["sent_ns"].to_numpy(zero_copy_only=False), dtype=np.int64)
    return (sent - origin).astype(np.float64)


def _ends_rel_ns(table: pa.Table, origin: int) -> np.ndarray:
    return _sent_rel_ns(table, origin) + np.nan_to_num(numeric(table, "e2e_ns"), nan=0.0)


def repeats(table: pa.Table) -> np.ndarray | None:
    """Each row's ``repeat`` (``--repeat``; null, in older traces, is 0) when the rows hold two
    or more repeats, else None (one run: nothing to tell apart)."""
    if "repeat" not in table.column_names or table.num_rows == 0:
        return None
    r = np.nan_to_num(numeric(table, "repeat"), nan=0.0).astype(np.int64)
    return r if np.unique(r).size > 1 else None


def span_s(table: pa.Table) -> float | None:
    """First ``sent_ns`` to the last answer end (``sent_ns + e2e_ns``), in seconds; for rows of
    several repeats (``repeats``), the sum of each repeat's own span (the time between repeats
    is no time of the run)."""
    if table.num_rows == 0:
        return None
    reps = repeats(table)
    if reps is None:
        span = float(np.max(_ends_rel_ns(table, first_sent_ns(table)))) / 1e9
    else:
        sent = np.asarray(table["sent_ns"].to_numpy(zero_copy_only=False), dtype=np.int64)
        ends = sent + np.nan_to_num(numeric(table, "e2e_ns"), nan=0.0).astype(np.int64)
        span = sum(float(ends[reps == r].max() - sent[reps == r].min()) for r in np.unique(reps)) / 1e9
    return span if span > 0 else None


def session_keys(table: pa.Table) -> np.ndarray:
    """Each row's session: its ``session_id``, told apart by its repeat when the rows hold
    several (the repeats of one workload have the same session ids); an empty id stays empty."""
    ids = np.asarray(table["session_id"].to_numpy(zero_copy_only=False), dtype=object)
    reps = repeats(table)
    if reps is None:
        return ids
    return np.array([f"r{r}/{s}" if s else "" for r, s in zip(reps.tolist(), ids.tolist(), strict=True)], dtype=object)


def output_tokens_by_bin(
    table: pa.Table, origin: int, bin_ns: float, nbins: int | None = None, *, chunks: Batches | None = None
) -> np.ndarray:
    """Output tokens arrived per ``bin_ns`` bin from ``origin``: each chunk of each ok row is
    placed at ``sent_ns + chunk_ns[i] − origin`` in bin ``⌊time / bin_ns⌋`` and counts its
    share of the row's tokens (``completion_tokens / len(chunk_ns)``: a chunk may carry
    several tokens; the row's tokens are spread evenly over its chunks). With ``nbins``, that
    many bins, later chunks counted in the last; else as many as the chunks reach. Summed a
    piece of the table at a time (``_chunk_pieces``; ``chunks``: the table's rows as read
    elsewhere, ``Batches``)."""
    out = np.zeros(nbins or 0)
    pieces = (chunks or table_batches(table))(["status", "chunk_ns", "sent_ns", "completion_tokens"])
    for batch, flat, offsets in _chunk_pieces(pieces, ok_only=True):
        n = offsets[1:] - offsets[:-1]
        sent = _sent_rel_ns(batch, origin)
        tokens = np.nan_to_num(numeric(batch, "completion_tokens"), nan=0.0)
        share = np.divide(tokens, n, out=np.zeros_like(tokens), where=n > 0)
        bins = ((np.repeat(sent, n) + flat) // bin_ns).astype(np.int64)
        if nbins is not None:
            np.clip(bins, 0, nbins - 1, out=bins)
        if not bins.size:
            continue
        if int(bins.max()) >= out.size:
            out = np.concatenate([out, np.zeros(int(bins.max()) + 1 - out.size)])
        # each share added in chunk order, as one bincount over all would: the same sums
        np.add.at(out, bins, np.repeat(share, n))
    return out


def output_tokens_per_s(table: pa.Table) -> float | None:
    """Σ ``completion_tokens`` of ok rows / span (``span_s``): ``throughput``'s
    ``output_tokens_per_s`` without its peak window."""
    span = span_s(table)
    completion = float(np.nansum(ok_values(table, "completion_tokens")))
    return completion / span if span else None


def throughput(
    table: pa.Table, window_s: float = 1.0, *, chunks: Batches | None = None
) -> dict[str, float | None]:
    """Token throughput of a table.

    - ``output_tokens_per_s``: Σ ``completion_tokens`` of ok rows / span
    - ``total_tokens_per_s``: Σ (``prompt_tokens`` + ``completion_tokens``) of ok rows / span
    - ``requests_per_s``: rows / span
    - ``peak_output_tokens_per_s``: the largest number of output tokens that arrived within one
      ``window_s`` window (windows laid from the first send; tokens placed at their chunk's
      arrival, see ``output_tokens_by_bin``; ``chunks``: the table's rows as read elsewhere),
      divided by ``window_s``
    """
    span = span_s(table)
    completion = float(np.nansum(ok_values(table, "completion_tokens")))
    prompt = float(np.nansum(ok_values(table, "prompt_tokens")))
    peak = None
    if table.num_rows:
        by_window = output_tokens_by_bin(table, first_sent_ns(table), window_s * 1e9, chunks=chunks)
        if by_window.size:
            peak = float(by_window.max()) / window_s
    return {
        "output_tokens_per_s": completion / span if span else None,
        "total_tokens_per_s": (completion + prompt) / span if span else None,
        "requests_per_s": table.num_rows / span if span else None,
        "peak_output_tokens_per_s": peak,
    }


def timeline(table: pa.Table, bin_s: float = 1.0) -> dict[str, list[float]]:
    """Per ``bin_s`` bin from the first send: ``t_s`` (bin start), ``output_tokens_per_s``
    (tokens arrived in the bin / ``bin_s``) and ``in_flight`` (rows with ``sent_ns <=`` bin
    start ``<`` their end)."""
    if table.num_rows == 0:
        return {"t_s": [], "output_tokens_per_s": [], "in_flight": []}
    origin = first_sent_ns(table)
    sent = _sent_rel_ns(table, origin)
    ends = _ends_rel_ns(table, origin)
    nbins = int(np.ceil(float(ends.max()) / (bin_s * 1e9))) + 1
    edges = np.arange(nbins) * bin_s * 1e9
    tokens = output_tokens_by_bin(table, origin, bin_s * 1e9, nbins)
    in_flight: np.ndarray = np.searchsorted(np.sort(sent), edges, side="right") - np.searchsorted(
        np.sort(ends), edges, side="right"
    )
    return {
        "t_s": [float(i * bin_s) for i in range(nbins)],
        "output_tokens_per_s": (tokens / bin_s).tolist(),
        "in_flight": in_flight.astype(float).tolist(),
    }


@dataclass(frozen=True)
class SLO:
    """Service-level bounds a request must meet to count as good (None: no bound)."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def describe(self) -> str:
        parts = [f"{k.removesuffix('_ms')}<={v:g}ms" for k, v in self.__dict__.items() if v is not None]
        return ", ".join(parts) or "none"


def parse_slos(items: Sequence[str]) -> SLO:
    """``["ttft:200ms", "itl:50ms"]`` to an SLO (units ms or s; a bare number is ms)."""
    bounds: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition(":")
        key = f"{name.strip().lower()}_ms"
        if not sep or key not in SLO.__dataclass_fields__:
            raise ValueError(f"--slo {item!r}: expected NAME:VALUE with NAME one of ttft, itl, tpot, e2e")
        text = value.strip().lower()
        scale = 1.0
        if text.endswith("ms"):
            text = text[:-2]
        elif text.endswith("s"):
            text, scale = text[:-1], 1000.0
        try:
            number = float(text) * scale
        except ValueError:
            raise ValueError(f"--slo {item!r}: {value!r} is not a duration such as 200ms or 1.5s") from None
        if number <= 0:
            raise ValueError(f"--slo {item!r}: the bound must be positive")
        bounds[key] = number
    return SLO(**bounds)


def good_mask(table: pa.Table, slo: SLO) -> np.ndarray:
    """Per row: status ``ok`` and every bound of ``slo`` met, where a row's figures are its
    TTFT (``ttft_ns``), its mean ITL (``mean_itl_ms_per_row``; met by a row with fewer than two
    chunks), its TPOT (``(e2e − ttft) / (completion_tokens − 1)``; met below two tokens) and
    its E2E (``e2e_ns``). A missing TTFT or E2E fails its bound."""
    good = np.asarray(pc.equal(table["status"], "ok").to_numpy(zero_copy_only=False), dtype=bool)
    if slo.ttft_ms is not None:
        good &= numeric(table, "ttft_ns") / 1e6 <= slo.ttft_ms  # NaN compares False
    if slo.e2e_ms is not None:
        good &= numeric(table, "e2e_ns") / 1e6 <= slo.e2e_ms
    if slo.itl_ms is not None:
        itl = mean_itl_ms_per_row(table)
        good &= np.isnan(itl) | (itl <= slo.itl_ms)
    if slo.tpot_ms is not None:
        tokens = numeric(table, "completion_tokens")
        tpot = (numeric(table, "e2e_ns") - numeric(table, "ttft_ns")) / np.maximum(tokens - 1, 1) / 1e6
        good &= ~(tokens >= 2) | (tpot <= slo.tpot_ms)
    return good


def goodput(table: pa.Table, slo: SLO) -> dict[str, Any]:
    """Requests meeting ``slo`` (``good_mask``): ``good`` (count), ``good_fraction`` (good /
    rows), ``request_goodput_per_s`` (good / span) and ``token_goodput_per_s`` (Σ
    ``completion_tokens`` of good rows / span)."""
    mask = good_mask(table, slo)
    span = span_s(table)
    tokens = float(np.nansum(numeric(table, "completion_tokens")[mask])) if table.num_rows else 0.0
    good = int(mask.sum())
    return {
        "slo": slo.describe(),
        "good": good,
        "good_fraction": good / table.num_rows if table.num_rows else None,
        "request_goodput_per_s": good / span if span else None,
        "token_goodput_per_s": tokens / span if span else None,
    }


def errors(table: pa.Table) -> dict[str, Any]:
    """Rows per ``status`` and each status's share of all rows; ``error_rate`` is the share of
    rows whose status is not ``ok``."""
    counts: dict[str, int] = {}
    if table.num_rows:
        for d in table["status"].value_counts().to_pylist():
            counts[d["values"]] = d["counts"]
    total = table.num_rows
    return {
        "by_status": dict(sorted(counts.items())),
        "rates": {k: v / total for k, v in sorted(counts.items())} if total else {},
        "error_rate": (total - counts.get("ok", 0)) / total if total else None,
    }


def cache(table: pa.Table) -> dict[str, float | int | None]:
    """Prefix-cache figures over the ok rows whose server reported both ``prompt_tokens`` and
    ``cached_tokens``:

    - ``hit_ratio``: Σ ``cached_tokens`` / Σ ``prompt_tokens`` (what the engine realised)
    - ``ideal_hit_ratio``: Σ ``ideal_cached_tokens_est`` / Σ ``prompt_tokens_est`` over the
      same rows (what an unbounded token-level cache could have reused)
    - ``prefill_tokens_saved``: Σ ``cached_tokens`` (prompt tokens the engine did not compute)
    - ``reporting_rows``: how many rows the figures rest on
    """
    prompt, cached, est_p, est_c = ok_columns(
        table, "prompt_tokens", "cached_tokens", "prompt_tokens_est", "ideal_cached_tokens_est"
    )
    rep = ~np.isnan(prompt) & ~np.isnan(cached)
    est_p, est_c = est_p[rep], est_c[rep]
    est = ~np.isnan(est_p) & ~np.isnan(est_c)
    p_sum, c_sum = float(prompt[rep].sum()), float(cached[rep].sum())
    ep_sum, ec_sum = float(est_p[est].sum()), float(est_c[est].sum())
    return {
        "hit_ratio": c_sum / p_sum if p_sum else None,
        "ideal_hit_ratio": ec_sum / ep_sum if ep_sum else None,
        "prefill_tokens_saved": int(c_sum),
        "reporting_rows": int(rep.sum()),
    }


def sessions(table: pa.Table) -> dict[str, np.ndarray]:
    """Agent sessions (rows grouped by non-empty ``session_id``), every status:

    - ``completion_ms``: last answer end (``max(sent_ns + e2e_ns)``) − first send
      (``min(sent_ns)``), ``/ 1e6``: the agent's task completion time
    - ``calls``: rows per session
    - ``keys``: each session's key (``session_keys``), in the order of the two above
    """
    ids = session_keys(table) if table.num_rows else None
    none = {"completion_ms": np.zeros(0), "calls": np.zeros(0), "keys": np.zeros(0, dtype=object)}
    if ids is None:
        return none
    keep = ids != ""
    if not keep.any():
        return none
    ids = ids[keep]
    origin = first_sent_ns(table)
    sent = _sent_rel_ns(table, origin)[keep]
    ends = _ends_rel_ns(table, origin)[keep]
    keys, group = np.unique(ids, return_inverse=True)
    n = int(group.max()) + 1
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, group, sent)
    np.maximum.at(last, group, ends)
    calls = np.bincount(group, minlength=n).astype(float)
    return {"completion_ms": (last - first) / 1e6, "calls": calls, "keys": keys}


def session_ids(table: pa.Table) -> int:
    """Distinct sessions (``session_keys``) over every row, an empty id included (the closing
    summary's "agents"; an imported trace without sessions counts 1)."""
    return int(np.unique(session_keys(table)).size) if table.num_rows else 0


def group_values(table: pa.Table, key: str) -> list[Any]:
    """Distinct values of column ``key``, sorted."""
    return sorted(v for v in pc.unique(table[key]).to_pylist() if v is not None)


def subset(table: pa.Table, key: str, value: Any) -> pa.Table:
    return table.filter(pc.equal(table[key], pa.scalar(value, table.schema.field(key).type)))


#: the columns a breakdown's figures read, besides its key (its subsets copy no other)
BREAKDOWN_COLUMNS = (
    "status", "ttft_ns", "e2e_ns", "prompt_tokens", "cached_tokens", "prompt_tokens_est",
    "ideal_cached_tokens_est",
)  # fmt: skip


def breakdown(table: pa.Table, key: str) -> list[dict[str, Any]]:
    """One entry per distinct value of ``key``: rows, ok rows, TTFT and E2E distributions,
    and the cache figures (see ``cache``)."""
    out = []
    table = table.select([c for c in dict.fromkeys((key, *BREAKDOWN_COLUMNS)) if c in table.column_names])
    for value in group_values(table, key):
        rows = subset(table, key, value)
        out.append(
            {
                key: value,
                "requests": rows.num_rows,
                "ok": ok_count(rows),
                "ttft_ms": distribution(ttft_ms(rows)),
                "e2e_ms": distribution(e2e_ms(rows)),
                "cache": cache(rows),
            }
        )
    return out


def first_and_branch_calls(table: pa.Table, columns: list[str] | None = None) -> dict[str, pa.Table]:
    """``first``: rows with no parent node (an agent's opening calls, ``depth == 0``);
    ``branch``: rows with at least one parent (calls that extend a parent's context).
    ``columns``: only these of the rows (a copy of every column is a copy of its chunk lists)."""
    if columns is not None:
        table = table.select([*columns, "parent_nodes"])
    n_parents = pc.fill_null(pc.list_value_length(table["parent_nodes"]), 0)
    has_parent = pc.greater(n_parents, 0)
    return {"first": table.filter(pc.invert(has_parent)), "branch": table.filter(has_parent)}
