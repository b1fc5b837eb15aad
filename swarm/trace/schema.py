"""The Arrow schema of the trace: column order and types of ``requests/*.parquet``.

Place in the map (docs/architecture.md, "The trace"): what the sink writes and the reader checks;
the columns are ``record.RequestIdentity``'s and ``record.RequestRecord``'s fields (checked
here on import). Columns, statuses and queries: docs/trace-schema.md.
"""

from __future__ import annotations

import pyarrow as pa

from swarm.record import IDENTITY_COLUMNS, RECORD_COLUMNS

#: Bump on a rename or removal of a column; additions keep the version.
SCHEMA_VERSION = 1

_I64 = pa.int64()
_STR = pa.string()

#: Column order and types of the ``requests/*.parquet`` files. See docs/trace-schema.md.
TRACE_SCHEMA = pa.schema(
    [
        pa.field("run_id", _STR, nullable=False),
        pa.field("target", _STR, nullable=False),
        pa.field("engine", _STR, nullable=False),
        pa.field("worker", pa.int32(), nullable=False),
        pa.field("agent_id", _I64, nullable=False),
        pa.field("profile", _STR, nullable=False),
        pa.field("topology", _STR, nullable=False),
        pa.field("session_id", _STR, nullable=False),
        pa.field("node", _STR, nullable=False),
        pa.field("parent_nodes", pa.list_(_STR), nullable=False),
        pa.field("depth", pa.int32(), nullable=False),
        pa.field("branch", pa.int32(), nullable=False),
        pa.field("role", _STR, nullable=False),
        pa.field("system_prompt_id", pa.int32(), nullable=False),
        pa.field("request_id", _STR, nullable=False),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("retry_of", _STR),
        pa.field("dialect", _STR, nullable=False),
        pa.field("model", _STR, nullable=False),
        pa.field("stream", pa.bool_(), nullable=False),
        pa.field("scheduled_ns", _I64, nullable=False),
        pa.field("sent_ns", _I64, nullable=False),
        pa.field("queue_ns", _I64, nullable=False),
        pa.field("ttft_ns", _I64),
        pa.field("e2e_ns", _I64),
        pa.field("chunk_ns", pa.list_(_I64), nullable=False),
        pa.field("max_tokens", _I64),
        pa.field("prompt_tokens", _I64),
        pa.field("completion_tokens", _I64),
        pa.field("cached_tokens", _I64),
        pa.field("prompt_tokens_est", _I64),
        pa.field("ideal_cached_tokens_est", _I64),
        pa.field("block_hashes", pa.list_(pa.uint64()), nullable=False),
        pa.field("status", _STR, nullable=False),
        pa.field("http_status", pa.int32()),
        pa.field("error", _STR),
        pa.field("finish_reason", _STR),
        pa.field("prompt_parts", pa.list_(_STR)),
        pa.field("prompt_roles", pa.list_(_STR)),
        pa.field("output_text", _STR),
        # added after schema version 1's first release: null in older traces (read as 0, false)
        pa.field("slot_wait_ns", _I64),
        pa.field("warmup", pa.bool_()),
        pa.field("repeat", pa.int32()),
        pa.field("clock", _STR),
        pa.field("chunk_lag_ns", pa.list_(_I64)),
        pa.field("replica", _STR),
        pa.field("replica_from", _STR),
    ],
    metadata={b"swarm.schema_version": str(SCHEMA_VERSION).encode()},
)

assert set(IDENTITY_COLUMNS) | set(RECORD_COLUMNS) == set(TRACE_SCHEMA.names), "schema drift"
