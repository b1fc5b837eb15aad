"""The RequestRecord: one row of the trace, and its Arrow schema.

Place in the map (docs/architecture.md, "Shared value types"): the foundation. The EngineClient makes one RequestRecord per
request; the TraceSink turns records into Parquet rows; analysis reads the rows back. This
module depends on nothing else in swarm, so every other part may import it.

Timing fields follow the trace contract: ``scheduled_ns`` and ``sent_ns`` are wall-clock
anchors (``time.time_ns``, aligned to the driver's clock on a cluster); every latency
(``queue_ns`` aside) is a ``perf_counter_ns`` delta measured in one process. ``queue_ns``
(sent minus scheduled) splits into ``slot_wait_ns`` (waiting for the in-flight cap: the load
asked for) and the dispatch lag (the rest: the generator falling behind, a fault).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class Status(str, enum.Enum):
    """Outcome of one request. A failed request is a row with one of these, never a crash."""

    OK = "ok"
    HTTP_ERROR = "http_error"
    TIMEOUT = "timeout"
    CONNECT_ERROR = "connect_error"
    STREAM_ERROR = "stream_error"
    CANCELLED = "cancelled"
    #: swarm's own client failed on this request (a bug): the error text names the exception
    CLIENT_ERROR = "client_error"


#: Error texts are truncated to this many characters before they enter a record.
MAX_ERROR_CHARS = 500


def truncate_error(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Return ``text`` cut to ``limit`` characters, marking the cut."""
    text = text.strip()
    if len(text) <= limit:
        return text
    marker = " …[truncated]"
    return text[: limit - len(marker)] + marker


@dataclass(frozen=True, slots=True)
class RequestIdentity:
    """Where a request sits in the swarm: who sent it, for which node of which session."""

    run_id: str = ""
    target: str = ""
    engine: str = ""
    worker: int = 0
    agent_id: int = -1
    profile: str = ""
    topology: str = ""
    session_id: str = ""
    node: str = ""
    parent_nodes: tuple[str, ...] = ()
    depth: int = 0
    branch: int = 0
    role: str = ""
    system_prompt_id: int = -1
    request_id: str = ""
    #: 0 for a first send; k for the k-th retry of it (retries are off unless asked for)
    attempt: int = 0
    #: request_id of the first attempt, on a retry's row; None on a first attempt
    retry_of: str | None = None
    #: a warm-up call of a session started mid-life (``--start-at mid``): it re-sends the
    #: history the session had before the sampled start, so the engine holds it; left out of
    #: every headline figure
    warmup: bool = False
    #: which of the run's repeats of this target sent it (``--repeat N``: 0 to N-1)
    repeat: int = 0


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the client saw it. Immutable once made.

    Latencies are in nanoseconds. ``chunk_ns`` holds the arrival offset, from the moment the
    request was sent, of every network read that carried generated content, so inter-token
    latencies can be computed exactly afterwards. ``ttft_ns`` equals ``chunk_ns[0]`` when there
    is any content; for a non-streamed request it is the time to the whole answer. ``chunk_ns``
    is a tuple from an HTTP client and an ``array('q')`` from the simulator (a thousand times
    a request at 8 bytes each; the trace sink reads its bytes in place; nothing changes it once
    the record is made): compare it as ``tuple(record.chunk_ns)``.
    """

    identity: RequestIdentity
    dialect: str
    model: str
    stream: bool
    scheduled_ns: int
    sent_ns: int
    queue_ns: int
    ttft_ns: int | None
    e2e_ns: int | None
    chunk_ns: Sequence[int]
    status: Status
    http_status: int | None = None
    error: str | None = None
    finish_reason: str | None = None
    max_tokens: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    prompt_tokens_est: int | None = None
    ideal_cached_tokens_est: int | None = None
    block_hashes: Sequence[int] = ()
    prompt_parts: tuple[str, ...] | None = None
    prompt_roles: tuple[str, ...] | None = None
    output_text: str | None = None
    #: of ``queue_ns``, the time spent waiting for a free slot under the in-flight cap
    #: (``max_in_flight``): load the run was asked to hold back, not the generator's delay
    slot_wait_ns: int = 0
    #: which clock timed ``chunk_ns``, ``ttft_ns`` and ``e2e_ns``: ``kernel`` (every content read's
    #: receive stamp, ``SO_TIMESTAMPNS``), ``user`` (the time the client read it: aiohttp,
    #: ``--receive-clock user``, a kernel without stamps, a whole answer) or ``mixed``
    clock: str = "user"
    #: per entry of ``chunk_ns``, the client's own lag: the user-space time of the read minus its
    #: kernel receive stamp (empty when ``clock`` is ``user``; 0 for an entry timed in user space)
    chunk_lag_ns: tuple[int, ...] = ()
    #: the replica of a fleet that served the request, as ``replica_from`` learned it (None when
    #: nothing said: a failed connection, an engine that does not name itself)
    replica: str | None = None
    #: how ``replica`` was learned: ``header`` (the response's ``X-Swarm-Replica``, which swarm's
    #: emulator sends); None with no replica
    replica_from: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def dispatch_lag_ns(self) -> int:
        """``queue_ns - slot_wait_ns``: how late the generator itself sent the request."""
        return self.queue_ns - self.slot_wait_ns

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def with_identity(self, **changes: Any) -> RequestRecord:
        """A copy with some identity fields replaced (records themselves never change)."""
        return dataclasses.replace(self, identity=dataclasses.replace(self.identity, **changes))


#: A request whose dispatch lag (``dispatch_lag_ns``: sent minus scheduled, less any wait for a
#: free slot under the in-flight cap) is above this counts as late: the generator is behind its
#: schedule. The live view, the end of a run and the report all judge by it.
LATE_NS = 10_000_000

IDENTITY_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RequestIdentity))
RECORD_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(RequestRecord) if f.name not in ("identity", "extra")
)


def record_row(record: RequestRecord) -> dict[str, Any]:
    """The record as one trace row (column name to Python value)."""
    row: dict[str, Any] = {name: getattr(record.identity, name) for name in IDENTITY_COLUMNS}
    for name in RECORD_COLUMNS:
        row[name] = getattr(record, name)
    row["status"] = record.status.value
    return row
