"""Engine-side metrics: the target's Prometheus endpoint, scraped during a run.

Place in the map (docs/architecture.md, "Runtime"; its figures are read in "Analysis"): while a
target runs, a ``ServerMetricsScraper`` thread fetches the engine's Prometheus text (SGLang
``/metrics``, TensorRT-LLM ``/prometheus/metrics``, vLLM, llama.cpp, the emulator: the path is
the engine profile's) every ``interval_s`` and keeps each sample as a row; at the end of the
run the rows of every target go to ``runs/<id>/server_metrics.parquet``:

``target`` (label), ``engine``, ``t_ns`` (wall clock of the scrape), ``metric``, ``labels``
(``k=v`` pairs, sorted, comma-separated), ``value`` (float). A fleet's target is scraped at
each replica instead (the router's URL is not: it may hand ``/metrics`` to any one worker),
every sample labelled ``swarm_replica=<replica URL>``, one ``t_ns`` per round; a replica that
stops answering is skipped while the others are kept.

Histogram buckets (``*_bucket``) are left out; their ``_sum`` and ``_count`` are kept. A
target without an endpoint (404, refused) is tried ``GIVE_UP_AFTER`` times, then left alone,
with one line in the log; scraping never fails a run.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from swarm.engines.engine import REPLICA_LABEL
from swarm.trace.storage import RunStorage

log = logging.getLogger(__name__)

FILE_NAME = "server_metrics.parquet"
GIVE_UP_AFTER = 3
SCHEMA = pa.schema(
    [
        pa.field("target", pa.string(), nullable=False),
        pa.field("engine", pa.string(), nullable=False),
        pa.field("t_ns", pa.int64(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("labels", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ]
)

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> list[tuple[str, str, float]]:
    """Samples of Prometheus text format as (metric, labels, value); comments, bucket series
    and unparseable lines are skipped."""
    out: list[tuple[str, str, float]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, _, labels_text, value_text = match.group(1), match.group(2), match.group(3), match.group(4)
        if name.endswith("_bucket"):
            continue
        try:
            value = float(value_text)
        except ValueError:
            continue
        if math.isnan(value):
            continue
        labels = ",".join(f"{k}={v}" for k, v in sorted(_LABEL.findall(labels_text or "")))
        out.append((name, labels, value))
    return out




def _with_replica(labels: str, replica: str) -> str:
    if not replica:
        return labels
    pairs = [p for p in labels.split(",") if p] + [f"{REPLICA_LABEL}={replica}"]
    return ",".join(sorted(pairs))


@dataclass
class ServerMetricsScraper:
    """Scrapes one target's endpoint on a thread from ``start()`` to ``stop()``."""

    target: str
    engine: str
    url: str  # the full metrics URL
    interval_s: float = 1.0
    headers: dict[str, str] = field(default_factory=dict)
    #: a fleet: (replica base URL, its metrics URL) each, scraped instead of ``url``
    replicas: tuple[tuple[str, str], ...] = ()
    rows: list[tuple[str, str, int, str, str, float]] = field(default_factory=list)
    scrapes: int = 0
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ServerMetricsScraper:
        self._thread = threading.Thread(target=self._loop, name=f"swarm-scrape-{self.target}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.scrape_once()  # the final counters, so deltas cover the whole run

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            if not self.scrape_once() and self.scrapes == 0 and self.failures >= GIVE_UP_AFTER:
                log.info("target %s: no metrics at %s; not scraping it", self.target, self.url)
                return
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def scrape_once(self) -> bool:
        """One scrape (of a fleet, one round over its replicas, all at one ``t_ns``); False when
        no endpoint answered with metrics."""
        if self.scrapes == 0 and self.failures >= GIVE_UP_AFTER:
            return False
        t_ns = time.time_ns()
        answered = False
        for replica, url in self.replicas or (("", self.url),):
            samples = self._fetch(url)
            if not samples:
                continue
            answered = True
            self.rows.extend(
                (self.target, self.engine, t_ns, name, _with_replica(labels, replica), value)
                for name, labels, value in samples
            )
        if not answered:
            self.failures += 1
            return False
        self.scrapes += 1
        return True

    def _fetch(self, url: str) -> list[tuple[str, str, float]]:
        request = urllib.request.Request(url, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=max(self.interval_s, 1.0)) as resp:
                text = resp.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.debug("target %s: metrics scrape of %s failed: %s", self.target, url, exc)
            return []
        return parse_prometheus(text)

    def table(self) -> pa.Table:
        columns: list[list[object]] = [[] for _ in SCHEMA]
        for row in self.rows:
            for column, value in zip(columns, row, strict=True):
                column.append(value)
        return pa.Table.from_arrays(
            [pa.array(c, f.type) for c, f in zip(columns, SCHEMA, strict=True)], schema=SCHEMA
        )


def write_server_metrics(storage: RunStorage, scrapers: list[ServerMetricsScraper]) -> str | None:
    """All scrapers' rows as ``server_metrics.parquet`` in the run folder; None if no rows."""
    tables = [s.table() for s in scrapers if s.rows]
    if not tables:
        return None
    with storage.fs.open_output_stream(storage.path(FILE_NAME)) as out:
        pq.write_table(pa.concat_tables(tables), out)
    return FILE_NAME
