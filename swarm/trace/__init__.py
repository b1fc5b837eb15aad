"""Traces on disk: the Parquet sink, the run manifest, and a reader.

Place in the map (docs/architecture.md, "The trace"): the TraceSink seam and the run directory layout
(``runs/<run_id>/manifest.json`` and ``runs/<run_id>/requests/*.parquet``). Analysis reads
what this package writes; nothing here knows about engines, agents or Ray.
"""

from swarm.trace.manifest import RunManifest, RunStatus, new_run_id
from swarm.trace.reader import list_parts, read_requests
from swarm.trace.sink import ParquetTraceSink, TraceSink

__all__ = [
    "ParquetTraceSink",
    "RunManifest",
    "RunStatus",
    "TraceSink",
    "list_parts",
    "new_run_id",
    "read_requests",
]
