"""A fleet's figures per replica, and where its prefix reuse went: to a replica's own cache, or away.

Place in the map (docs/architecture.md, "Analysis"): read by ``report`` (the per-replica table)
and ``compare`` (the routing share of a difference) for every target whose requests name the
replica that served them (the trace's ``replica`` column) or whose replicas were scraped.

Per replica (rows that name it; first attempts and retries alike, warm-ups left out):

- ``requests``, ``failed``; ``load_share`` = its requests / the fleet's; the fleet's
  ``imbalance`` = the busiest replica's requests / the mean over replicas (1.0: even);
- ``prompt_tokens``, ``cached_tokens``, ``ideal_tokens``; ``hit`` = cached / prompt,
  ``hit_vs_ideal`` = cached / ideal (requests that succeeded);
- the **missed** prompt tokens ``miss = max(prompt - cached, 0)`` of each request that succeeded,
  split in three, in send order within each repeat, over the 64-token chained block hashes the
  client sent (``block_hashes``), where ``global`` is the longest run of the request's leading
  blocks sent before to any replica and ``local`` the same for its own replica:

  - ``compulsory = min(miss, max(prompt - ideal, 0))``: never sent before (``ideal`` =
    ``ideal_cached_tokens_est``, else ``64 × global``);
  - ``routed_away = min(miss - compulsory, max(ideal - 64 × local, 0))`` where ``global >
    local``, else 0: reusable, but sent before to another replica only;
  - ``evicted = miss - routed_away - compulsory``: sent to this replica before and not served
    from its cache (evicted, never stored, or lost to the cache's block size).

  Each request's three parts add up to its miss; shares are over the fleet's missed tokens.
  The requests of every replica seed the blocks seen (warm-ups included; failed requests not).
- ``server_hit`` and ``server_prompt_tokens``: the replica's own hit ratio and prompt tokens
  from its scraped counters (``engine_metrics.cache_token_deltas``), where it was scraped: how a
  fleet of engines that do not name themselves is still split (then ``load_share`` and the
  imbalance are by those prompt tokens).

A replica **lost** mid-run (``replica_losses``): one whose last answer (the end of its last
request that succeeded) came more than ``LOST_QUIET_S`` before the fleet's last send, and that
either failed requests after it or stopped answering its scrapes before the others did. A
replica no response names (a real engine) is judged by its scrapes alone: lost when its last
answered scrape came more than ``LOST_QUIET_S`` before the fleet's last send and more than
``SCRAPES_MISSED`` scrape rounds (at least ``LOST_QUIET_S``) before the others' last (failures are not required: a router retries a request that found a dead worker
before its stream began, so the loss may fail nothing the client sees). For
each: ``gone_at_s`` (that last answer, from the run's first send); ``failed`` (requests of any
replica that failed ending after it) and ``retried`` (retries sent after it);
``errors_recovered_after_s`` (from ``gone_at`` to the end of the last of those failures);
``hit_recovered_after_s`` (to the end of the first ``HIT_BIN_S`` bin after it whose fleet hit,
cached / prompt over the requests ending in it, is back to ``HIT_RECOVERED`` of the hit over the
``HIT_BASELINE_S`` before it; None when it never was); ``sessions_lost_prefix`` (sessions served
by it before and sent to another replica after: their cached prefix went with it).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from swarm.engines.engine import REPLICA_LABEL
from swarm.trace.reader import give_back_arrow_memory

#: the client's block size for ``block_hashes`` (``workload/prefix.py``)
HASH_BLOCK_TOKENS = 64


@dataclass
class ReplicaFigures:
    replica: str
    requests: int = 0
    failed: int = 0
    load_share: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ideal_tokens: int = 0
    compulsory: int = 0
    evicted: int = 0
    routed_away: int = 0
    server_hit: float | None = None
    #: prompt tokens the replica's own counters say it took during the run
    server_prompt_tokens: float | None = None

    @property
    def hit(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def hit_vs_ideal(self) -> float | None:
        return self.cached_tokens / self.ideal_tokens if self.ideal_tokens else None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"hit": self.hit, "hit_vs_ideal": self.hit_vs_ideal}


#: a replica silent this long before the fleet's last send may have been lost (seconds)
LOST_QUIET_S = 2.0
#: ... and its scrapes stopped when it missed this many scrape rounds (at least ``LOST_QUIET_S``)
SCRAPES_MISSED = 3
#: the hit ratio's recovery after a loss: bins, the share of the hit before that counts as back,
#: and how long before the loss that hit is taken over (seconds)
HIT_BIN_S = 1.0
HIT_RECOVERED = 0.9
HIT_BASELINE_S = 10.0


@dataclass
class ReplicaLoss:
    replica: str
    gone_at_s: float
    failed: int
    retried: int
    errors_recovered_after_s: float
    hit_recovered_after_s: float | None
    #: None where no request named its replica
    sessions_lost_prefix: int | None


@dataclass
class FleetFigures:
    """One target's fleet: its replicas' figures and the fleet's totals."""

    replicas: list[ReplicaFigures] = field(default_factory=list)
    #: rows that named no replica (a refused connection; an engine that does not name itself)
    unattributed: int = 0
    #: how the requests were attributed: ``header``, ``simulated`` (``swarm simulate``), or None
    #: (replicas scraped only)
    attributed_by: str | None = None
    #: replicas lost mid-run (``replica_losses``)
    losses: list[ReplicaLoss] = field(default_factory=list)

    @property
    def imbalance(self) -> float | None:
        """The busiest replica's requests over the mean (by the replicas' own prompt-token
        counters where no request named its replica)."""
        counts = [float(r.requests) for r in self.replicas]
        if self.attributed_by is None:
            counts = [r.server_prompt_tokens or 0.0 for r in self.replicas]
        return max(counts) / (sum(counts) / len(counts)) if counts and sum(counts) else None

    @property
    def missed_tokens(self) -> int:
        return sum(r.compulsory + r.evicted + r.routed_away for r in self.replicas)

    def share(self, part: str) -> float | None:
        """``part`` (compulsory, evicted, routed_away) over the fleet's missed tokens."""
        missed = self.missed_tokens
        return sum(getattr(r, part) for r in self.replicas) / missed if missed else None

    @property
    def hit(self) -> float | None:
        """Cached over prompt tokens of the requests; by the replicas' own counters where no
        request named its replica."""
        if self.attributed_by is None:
            counted = [r for r in self.replicas if r.server_prompt_tokens and r.server_hit is not None]
            prompt_f = sum(r.server_prompt_tokens or 0.0 for r in counted)
            return sum((r.server_prompt_tokens or 0.0) * (r.server_hit or 0.0) for r in counted) / prompt_f if prompt_f else None
        prompt = sum(r.prompt_tokens for r in self.replicas)
        return sum(r.cached_tokens for r in self.replicas) / prompt if prompt else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "replicas": [r.as_dict() for r in self.replicas],
            "unattributed": self.unattributed,
            "attributed_by": self.attributed_by,
            "imbalance": self.imbalance,
            "hit": self.hit,
            "missed_tokens": self.missed_tokens,
            "miss_shares": {p: self.share(p) for p in ("compulsory", "evicted", "routed_away")},
            "losses": [asdict(loss) for loss in self.losses],
        }


def _in_first_order(keys: pa.Array) -> np.ndarray:
    """Each key's number, keys numbered in the order they first occur (Arrow's hash table,
    as ``dictionary_encode`` numbers them: no sort; a null is a key of its own)."""
    return pc.dictionary_encode(keys, null_encoding="encode").indices.to_numpy(zero_copy_only=False)


def _first_rows(rows: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """For each element (its row, nondecreasing along the elements, and its key's number,
    ``_in_first_order``), the first row that held its key: that of its number's first
    element."""
    if not numbers.size:
        return rows.copy()
    new = np.empty(numbers.size, dtype=bool)  # a number not seen before: the next one
    new[0] = True
    np.greater(numbers[1:], np.maximum.accumulate(numbers)[:-1], out=new[1:])
    return rows[np.flatnonzero(new)][numbers]


def _leading_seen(hashes: pa.Array, replicas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row (``hashes``: each row's block hashes, rows in send order; ``replicas``: each
    row's replica as an index), how many of its leading hashes (chained: each names its
    whole prefix) an earlier row sent to any replica (``global``), and to its own
    (``local``): the rows' hashes are "seen" from the row after the first that held them."""
    lengths = pc.fill_null(pc.list_value_length(hashes), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    # each hash by its number (a null item, which the client never writes, one value too)
    numbers = _in_first_order(pc.list_flatten(hashes))
    row_of = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    by_replica = np.argsort(np.repeat(replicas, lengths), kind="stable")  # rows in order within each
    cuts = np.cumsum(np.bincount(replicas, weights=lengths).astype(np.int64))
    local = np.empty_like(row_of)
    for mine in np.split(by_replica, cuts[:-1]):  # each replica's hashes on their own
        local[mine] = _first_rows(row_of[mine], _in_first_order(pa.array(numbers[mine])))
    out = []
    for first in (_first_rows(row_of, numbers), local):
        unseen = np.flatnonzero(first >= row_of)  # no row before this one sent it
        after = np.append(unseen, np.iinfo(np.int64).max)  # a row with none: its end
        out.append(np.minimum(after[np.searchsorted(unseen, starts)], ends) - starts)
    return out[0], out[1]


_COLUMNS = (
    "replica", "sent_ns", "e2e_ns", "status", "prompt_tokens", "prompt_tokens_est", "cached_tokens",
    "ideal_cached_tokens_est", "warmup", "repeat", "session_id", "attempt", "replica_from",
)  # fmt: skip


def _tally(
    by: dict[str, ReplicaFigures],
    rows: list[dict[str, Any]],
    hashes: pa.Array,
    window_ns: tuple[int, int] | None,
) -> None:
    """The miss split of one repeat's rows, in send order (the caches are emptied between
    repeats); with ``window_ns``, only the rows sent in ``[start, end)`` are counted, every row
    before them seeding what the replicas have seen (``hashes``: the table's ``block_hashes``,
    each row's at its ``_at``; failed rows seed nothing)."""
    ordered = sorted(rows, key=lambda r: r["sent_ns"])
    ok_rows = [r for r in ordered if r["status"] == "ok"]
    index = {replica: i for i, replica in enumerate({r["replica"]: None for r in ok_rows})}
    picked = hashes.take(pa.array([r["_at"] for r in ok_rows], pa.int64()))
    replicas = np.array([index[r["replica"]] for r in ok_rows], dtype=np.int64)
    global_of, local_of = _leading_seen(picked, replicas)
    leading = {id(r): (int(g), int(loc)) for r, g, loc in zip(ok_rows, global_of, local_of, strict=True)}
    for row in ordered:
        replica, ok = row["replica"], row["status"] == "ok"
        counted = not row.get("warmup") and (window_ns is None or window_ns[0] <= row["sent_ns"] < window_ns[1])
        if counted:
            figures = by.setdefault(replica, ReplicaFigures(replica))
            figures.requests += 1
            figures.failed += not ok
        if not ok or not counted:
            continue
        prompt = row["prompt_tokens"] if row["prompt_tokens"] is not None else (row["prompt_tokens_est"] or 0)
        cached = row["cached_tokens"] or 0
        global_blocks, local_blocks = leading[id(row)]
        ideal = row["ideal_cached_tokens_est"]
        ideal = min(ideal if ideal is not None else HASH_BLOCK_TOKENS * global_blocks, prompt)
        miss = max(prompt - cached, 0)
        compulsory = min(miss, max(prompt - ideal, 0))
        away = max(ideal - HASH_BLOCK_TOKENS * local_blocks, 0) if global_blocks > local_blocks else 0
        routed = min(miss - compulsory, away)
        figures.prompt_tokens += prompt
        figures.cached_tokens += cached
        figures.ideal_tokens += ideal
        figures.routed_away += routed
        figures.compulsory += compulsory
        figures.evicted += miss - routed - compulsory


def _block_hashes(table: pa.Table) -> pa.Array:
    """The table's ``block_hashes`` as one list array: empty lists where it has none (no
    column, or one of nulls only, as a table built by hand may have): no prefix is then
    known to have been sent before, so none is counted as routed away."""
    if "block_hashes" not in table.column_names or pa.types.is_null(table.schema.field("block_hashes").type):
        return pa.array([[]] * table.num_rows, pa.list_(pa.uint64()))
    return table["block_hashes"].combine_chunks()


def _of_replica(labels: pa.ChunkedArray, replica: str) -> pa.ChunkedArray:
    """Which samples carry the label ``swarm_replica=<replica>`` (a whole pair: one URL may
    begin another)."""
    pair = f"{REPLICA_LABEL}={replica}"
    ends = pc.or_(pc.ends_with(labels, "," + pair), pc.equal(labels, pair))
    return pc.or_(ends, pc.or_(pc.match_substring(labels, "," + pair + ","), pc.starts_with(labels, pair + ",")))


def fleet_figures(
    table: pa.Table,
    metrics: pa.Table | None = None,
    replicas: list[str] | None = None,
    names: dict[str, str] | None = None,
    windows_ns: dict[int, tuple[int, int]] | None = None,
) -> FleetFigures | None:
    """The fleet figures of one target's rows (``table``), with its scraped samples
    (``metrics``, that target's) for each replica's ``server_*``. ``replicas``: the URLs the
    manifest lists; ``names``: the name each of them gives itself (``X-Swarm-Replica``, the rows'
    ``replica``), mapped back to its URL; ``windows_ns``: per repeat, the window whose rows are
    counted (a sweep point's steady window; the rows before it only seed the caches). None where
    fewer than two replicas are named or listed (one server: nothing to split)."""
    named = table.column("replica") if "replica" in table.column_names else None
    cols = [c for c in _COLUMNS if c in table.column_names]
    everything = table.select(cols).to_pylist() if named is not None else []
    url_of = {name: url for url, name in (names or {}).items()}
    for at, row in enumerate(everything):
        row["_at"] = at  # where its block hashes are (read as arrays, not as Python ints)
        if row["replica"] is not None:
            row["replica"] = url_of.get(row["replica"], row["replica"])
    attributed = [r for r in everything if r["replica"] is not None]
    listed = list(replicas or [])
    if len({r["replica"] for r in attributed} | set(listed)) < 2:
        return None
    hashes = _block_hashes(table)
    by: dict[str, ReplicaFigures] = {u: ReplicaFigures(u) for u in listed}
    repeats: dict[int, list[dict[str, Any]]] = {}
    for row in attributed:
        repeats.setdefault(int(row.get("repeat") or 0), []).append(row)
    for repeat, rows in repeats.items():
        _tally(by, rows, hashes, (windows_ns or {}).get(repeat) if windows_ns is not None else None)
    give_back_arrow_memory()  # the hashes' numbering, kept by Arrow's pool (369 MB for 8 M)
    _server_figures(by, metrics)
    shares = {f.replica: float(f.requests) for f in by.values()}
    if not attributed:  # nothing named its replica: the load by the replicas' own counters
        shares = {f.replica: f.server_prompt_tokens or 0.0 for f in by.values()}
    total = sum(shares.values())
    for figures in by.values():
        figures.load_share = shares[figures.replica] / total if total else 0.0
    unnamed = [r for r in everything if r["replica"] is None and not r.get("warmup")] if everything else []
    return FleetFigures(
        replicas=sorted(by.values(), key=lambda r: r.replica),
        unattributed=len(unnamed) if named is not None else table.num_rows,
        attributed_by=(attributed[0].get("replica_from") or "header") if attributed else None,
        losses=replica_losses(everything, _last_scrapes_ns(metrics), _scrape_gap_ns(metrics)) if windows_ns is None else [],
    )


def _server_figures(by: dict[str, ReplicaFigures], metrics: pa.Table | None) -> None:
    """Each replica's ``server_prompt_tokens`` and ``server_hit`` from its own counters."""
    from swarm.analysis.engine_metrics import cache_token_deltas

    if metrics is None or not metrics.num_rows:
        return
    for figures in by.values():
        mine = metrics.filter(_of_replica(metrics["labels"], figures.replica))
        deltas = cache_token_deltas(mine) if mine.num_rows else None
        if deltas is not None:
            figures.server_prompt_tokens = deltas[1]
            figures.server_hit = deltas[0] / deltas[1] if deltas[1] > 0 else None


def _last_scrapes_ns(metrics: pa.Table | None) -> dict[str, int]:
    """Per replica, the time of its last scrape that answered (ns)."""
    if metrics is None or not metrics.num_rows:
        return {}
    out: dict[str, int] = {}
    for labels, t_ns in zip(metrics["labels"].to_pylist(), metrics["t_ns"].to_pylist(), strict=True):
        for pair in labels.split(","):
            if pair.startswith(REPLICA_LABEL + "="):
                replica = pair[len(REPLICA_LABEL) + 1 :]
                out[replica] = max(out.get(replica, 0), t_ns)
    return out


def _scrape_gap_ns(metrics: pa.Table | None) -> int:
    """The median gap between scrape rounds (ns; 0 with fewer than two)."""
    if metrics is None or not metrics.num_rows:
        return 0
    rounds = sorted(set(metrics["t_ns"].to_pylist()))
    gaps = sorted(b - a for a, b in itertools.pairwise(rounds))
    return gaps[len(gaps) // 2] if gaps else 0


def _end_ns(row: dict[str, Any]) -> int:
    return int(row["sent_ns"]) + int(row["e2e_ns"] or 0)


def replica_losses(
    rows: list[dict[str, Any]], last_scrape_ns: dict[str, int], scrape_gap_ns: int = 0
) -> list[ReplicaLoss]:
    """The replicas lost mid-run, by the rule in the module docstring (``rows``: the fleet's
    rows, warm-ups and every repeat included; a failure that names no replica, as a router's
    error for a worker it lost, counts for every replica). A replica no row names (an engine
    that does not name itself) is judged by its scrapes: gone at its last one, when it stopped
    more than ``LOST_QUIET_S`` before the others' and the fleet's last send; then which
    sessions lost their prefix is not known (None); no failure is required of it (a router's
    retries may have hidden them)."""
    if not rows:
        return []
    start = min(int(r["sent_ns"]) for r in rows)
    last_send = max(int(r["sent_ns"]) for r in rows)
    scraped_last = max(last_scrape_ns.values(), default=0)
    # a replica's scrapes have stopped when it missed more than a slow scrape or two would
    scrapes_quiet_ns = max(LOST_QUIET_S * 1e9, SCRAPES_MISSED * scrape_gap_ns)
    losses = []
    for replica in sorted({r["replica"] for r in rows if r["replica"] is not None} | set(last_scrape_ns)):
        mine = [r for r in rows if r["replica"] == replica]
        answered = [_end_ns(r) for r in mine if r["status"] == "ok"]
        gone_ns = max(answered) if answered else last_scrape_ns.get(replica, start)
        failures = [_end_ns(r) for r in rows if r["status"] != "ok" and _end_ns(r) >= gone_ns]
        failed_after = any(r["status"] != "ok" and _end_ns(r) >= gone_ns and r["replica"] in (replica, None) for r in rows)
        scrapes_stopped = replica in last_scrape_ns and scraped_last - last_scrape_ns[replica] > scrapes_quiet_ns
        quiet = last_send - gone_ns > LOST_QUIET_S * 1e9
        if not (quiet and (failed_after or scrapes_stopped) if answered else quiet and scrapes_stopped):
            continue
        moved: set[Any] | None = None
        if answered:
            before = {r["session_id"] for r in mine if r["status"] == "ok"}
            moved = {
                r["session_id"] for r in rows
                if r["replica"] not in (replica, None) and r["sent_ns"] > gone_ns and r["session_id"] in before
            }  # fmt: skip
        losses.append(
            ReplicaLoss(
                replica=replica,
                gone_at_s=(gone_ns - start) / 1e9,
                failed=len(failures),
                retried=sum(1 for r in rows if (r.get("attempt") or 0) > 0 and r["sent_ns"] > gone_ns),
                errors_recovered_after_s=(max(failures) - gone_ns) / 1e9 if failures else 0.0,
                hit_recovered_after_s=_hit_recovery_s(rows, gone_ns),
                sessions_lost_prefix=len(moved) if moved is not None else None,
            )
        )
    return losses


def _hit_recovery_s(rows: list[dict[str, Any]], gone_ns: int) -> float | None:
    """Seconds from ``gone_ns`` to the end of the first bin after it whose fleet hit is back to
    ``HIT_RECOVERED`` of the hit in the ``HIT_BASELINE_S`` before it (None: never, or no hit
    before to come back to)."""
    import numpy as np

    ok = [r for r in rows if r["status"] == "ok" and not r.get("warmup")]
    if not ok:
        return None
    ends = np.array([_end_ns(r) for r in ok], dtype=np.int64)
    order = np.argsort(ends)
    ends = ends[order]
    prompt = np.cumsum(
        np.array([r["prompt_tokens"] if r["prompt_tokens"] is not None else (r["prompt_tokens_est"] or 0) for r in ok], dtype=float)[order]
    )
    cached = np.cumsum(np.array([r["cached_tokens"] or 0 for r in ok], dtype=float)[order])

    def hit(lo: int, hi: int) -> float | None:
        a, b = np.searchsorted(ends, [lo, hi])
        below = (prompt[a - 1], cached[a - 1]) if a else (0.0, 0.0)
        tokens = prompt[b - 1] - below[0] if b else 0.0
        return float((cached[b - 1] - below[1]) / tokens) if b > a and tokens else None

    baseline = hit(gone_ns - int(HIT_BASELINE_S * 1e9), gone_ns + 1)
    if not baseline:
        return None
    step = int(HIT_BIN_S * 1e9)
    for lo in range(gone_ns + 1, int(ends[-1]) + 1, step):  # the bins after the last answer
        now = hit(lo, lo + step)
        if now is not None and now >= HIT_RECOVERED * baseline:
            return (lo + step - gone_ns) / 1e9
    return None
