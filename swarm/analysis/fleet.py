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
- ``server_hit``: the replica's own hit ratio from its scraped counters (``engine_metrics``),
  where it was scraped: how a fleet of engines that do not name themselves is still split.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from swarm.engines.engine import REPLICA_LABEL

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

    @property
    def hit(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def hit_vs_ideal(self) -> float | None:
        return self.cached_tokens / self.ideal_tokens if self.ideal_tokens else None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"hit": self.hit, "hit_vs_ideal": self.hit_vs_ideal}


@dataclass
class FleetFigures:
    """One target's fleet: its replicas' figures and the fleet's totals."""

    replicas: list[ReplicaFigures] = field(default_factory=list)
    #: rows that named no replica (a refused connection; an engine that does not name itself)
    unattributed: int = 0
    #: how the requests were attributed: ``header``, or None (replicas scraped only)
    attributed_by: str | None = None

    @property
    def imbalance(self) -> float | None:
        counts = [r.requests for r in self.replicas]
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
        }


def _leading(hashes: list[int], seen: set[int]) -> int:
    """How many of ``hashes`` (chained: each names its whole prefix) lead the list in ``seen``."""
    n = 0
    for h in hashes:
        if h not in seen:
            break
        n += 1
    return n


_COLUMNS = (
    "replica", "sent_ns", "status", "block_hashes", "prompt_tokens", "prompt_tokens_est", "cached_tokens",
    "ideal_cached_tokens_est", "warmup", "repeat",
)  # fmt: skip


def _tally(by: dict[str, ReplicaFigures], rows: list[dict[str, Any]]) -> None:
    """The miss split of one repeat's rows, in send order (the caches are emptied between repeats)."""
    seen_any: set[int] = set()
    seen: dict[str, set[int]] = {}
    for row in sorted(rows, key=lambda r: r["sent_ns"]):
        replica, ok = row["replica"], row["status"] == "ok"
        hashes = list(row["block_hashes"] or ())
        if not row.get("warmup"):
            figures = by.setdefault(replica, ReplicaFigures(replica))
            figures.requests += 1
            figures.failed += not ok
        if not ok:
            continue
        local_seen = seen.setdefault(replica, set())
        if not row.get("warmup"):
            prompt = row["prompt_tokens"] if row["prompt_tokens"] is not None else (row["prompt_tokens_est"] or 0)
            cached = row["cached_tokens"] or 0
            global_blocks = _leading(hashes, seen_any)
            local_blocks = _leading(hashes, local_seen)
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
        seen_any.update(hashes)
        local_seen.update(hashes)


def _of_replica(labels: pa.ChunkedArray, replica: str) -> pa.ChunkedArray:
    """Which samples carry the label ``swarm_replica=<replica>`` (a whole pair: one URL may
    begin another)."""
    pair = f"{REPLICA_LABEL}={replica}"
    ends = pc.or_(pc.ends_with(labels, "," + pair), pc.equal(labels, pair))
    return pc.or_(ends, pc.or_(pc.match_substring(labels, "," + pair + ","), pc.starts_with(labels, pair + ",")))


def fleet_figures(table: pa.Table, metrics: pa.Table | None = None, replicas: list[str] | None = None) -> FleetFigures | None:
    """The fleet figures of one target's rows (``table``), with its scraped samples
    (``metrics``, that target's) for each replica's ``server_hit``; None where the rows name
    fewer than two replicas and none were listed (one server: nothing to split)."""
    from swarm.analysis.engine_metrics import target_figures

    named = table.column("replica") if "replica" in table.column_names else None
    if named is None or named.null_count == table.num_rows:
        attributed: list[dict[str, Any]] = []
    else:
        cols = [c for c in _COLUMNS if c in table.column_names]
        attributed = table.filter(pc.is_valid(named)).select(cols).to_pylist()
    listed = list(replicas or [])
    distinct = {r["replica"] for r in attributed}
    if len(distinct | set(listed)) < 2:
        return None
    by: dict[str, ReplicaFigures] = {u: ReplicaFigures(u) for u in listed}
    repeats: dict[int, list[dict[str, Any]]] = {}
    for row in attributed:
        repeats.setdefault(int(row.get("repeat") or 0), []).append(row)
    for rows in repeats.values():
        _tally(by, rows)
    total = sum(r.requests for r in by.values())
    for figures in by.values():
        figures.load_share = figures.requests / total if total else 0.0
        if metrics is not None and metrics.num_rows:
            mine = metrics.filter(_of_replica(metrics["labels"], figures.replica))
            if mine.num_rows:
                figures.server_hit = target_figures(mine)["cache_hit_ratio"]
    unnamed = table if named is None else table.filter(pc.is_null(named))
    if "warmup" in unnamed.column_names:
        unnamed = unnamed.filter(pc.invert(pc.fill_null(unnamed["warmup"], False)))
    return FleetFigures(
        replicas=sorted(by.values(), key=lambda r: r.replica),
        unattributed=unnamed.num_rows,
        attributed_by="header" if attributed else None,
    )
