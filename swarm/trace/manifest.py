"""The run manifest: ``runs/<run_id>/manifest.json``.

Place in the map (docs/architecture.md, "The trace"): part of the trace contract. It says what was run (spec, seed,
versions), against what (targets and what each server said about itself), by whom (workers
and their clock offsets), and how it ended (status and counts). It is written when a run
starts (status ``running``) and rewritten atomically when it ends, so a reader can always
parse it. It never holds secrets: targets carry the *name* of the API-key variable only.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import os
import secrets
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swarm.errors import InputError
from swarm.trace.schema import SCHEMA_VERSION
from swarm.trace.storage import RunStorage

MANIFEST_NAME = "manifest.json"


class RunStatus(str, enum.Enum):
    RUNNING = "running"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    #: ended early on its own: a target's circuit breaker tripped (see ``status_reason``)
    STOPPED = "stopped"


class TargetInfo(BaseModel):
    """One engine endpoint a run sent traffic to."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="label used in the trace's `target` column")
    url: str = Field(description="base URL, credentials removed")
    engine: str = Field(description="engine profile: sglang, trtllm, vllm, llamacpp")
    dialect: str = Field(description="API dialect used for requests")
    model: str = Field(default="", description="model name sent in requests")
    emulated: bool = Field(default=False, description="true when the target is swarm's emulator")
    api_key_env: str | None = Field(default=None, description="name of the variable holding the key")
    api_key_file: str | None = Field(default=None, description="path of the file holding the key")
    server_info: dict[str, Any] = Field(default_factory=dict, description="what the server said")
    replicas: list[str] = Field(
        default_factory=list,
        description="a fleet: the replicas behind the router at `url` (base URLs, credentials removed); "
        "empty for one server",
    )
    replica_names: dict[str, str] = Field(
        default_factory=dict,
        description="of each replica that names itself in X-Swarm-Replica (the trace's `replica`), that "
        "name by its URL in `replicas`",
    )
    outcome: str = Field(
        default="pending",
        description="how this target's part of the run ended: complete, interrupted, stopped, failed, "
        "or not_run (the run ended before it came to this target); pending while the run goes on",
    )
    sessions_planned: int = Field(default=0, description="agent sessions planned (0 for a replay)")
    sessions_started: int = Field(default=0, description="sessions that started")
    sessions_finished: int = Field(default=0, description="sessions that ran to their end")
    sessions_cut: int = Field(
        default=0, description="sessions started but cut short by the run's stop (interrupt, halt, limit)"
    )

    sessions_lost: int = Field(
        default=0,
        description="sessions of workers that were lost (their node gone) that did not run to their end",
    )

    def shortfall(self) -> str | None:
        """What of this target's part did not happen, in words (None when it all did)."""
        if self.outcome == "not_run":
            return "not run (the run ended before it came to this target)"
        if self.outcome == "complete" and not self.sessions_lost and self.sessions_started == self.sessions_planned:
            if not self.sessions_cut:
                return None
            return (
                f"{self.sessions_cut} of {self.sessions_started} sessions were still going when the run's "
                "duration or request limit ended it (a measurement window: their later calls were not sent)"
            )
        if self.sessions_cut or self.sessions_lost or self.sessions_started < self.sessions_planned:
            return (
                f"{self.sessions_started} of {self.sessions_planned} agent sessions started, "
                f"{self.sessions_cut} of them cut short by the run's stop ({self.outcome})"
                + (f"; {self.sessions_lost} lost with their worker" if self.sessions_lost else "")
            )
        return None


class WorkerInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str = Field(default="", description="the target this worker sent to")
    worker: int
    host: str = Field(default="", description="the worker process's host name")
    pid: int = 0
    node_id: str = Field(default="", description="the Ray node it ran on (empty outside Ray)")
    node_ip: str = Field(default="", description="that node's address")
    clock_offset_ns: int = Field(default=0, description="worker wall clock minus driver's")
    alive: bool = True
    error: str | None = Field(default=None, description="why the worker ended early, if it did")
    sessions: int = Field(default=0, description="agent sessions assigned to it")
    sessions_cut: int = Field(default=0, description="assigned sessions that did not finish")
    requests: int = Field(default=0, description="records received from it (its rows in the trace)")
    requests_sent: int = Field(
        default=0, description="requests it sent, as it last reported (rows + records_lost)"
    )
    records_lost: int = Field(
        default=0,
        description="requests it sent whose records never reached the trace (a lost worker: those in "
        "flight or not yet handed over when it was lost)",
    )
    lost_at: str | None = Field(
        default=None, description="when the driver found the worker gone (UTC, ISO 8601); None if it was not"
    )
    last_drain_at: str | None = Field(
        default=None, description="a lost worker's last hand-over of records (UTC, ISO 8601)"
    )
    sessions_cut_ids: list[str] = Field(
        default_factory=list, description="a lost worker's sessions that did not run to their end"
    )
    peak_rss_bytes: int = Field(default=0, description="the worker process's peak resident memory")
    start_rss_bytes: int = Field(default=0, description="its resident memory when its agents started")
    cpu_s: float = Field(default=0.0, description="CPU seconds its process used while it ran (all threads)")


class RunManifest(BaseModel):
    """Everything about a run that is not a request row."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    schema_version: int = SCHEMA_VERSION
    swarm_version: str = ""
    kind: str = Field(default="run", description="run, replay, ...")
    repeats: int = Field(default=1, description="how many times each target was run over (--repeat)")
    created_at: str = Field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat())
    finished_at: str | None = None
    status: RunStatus = RunStatus.RUNNING
    status_reason: str | None = None
    seed: int | None = None
    spec: dict[str, Any] = Field(default_factory=dict)
    spec_hash: str | None = Field(
        default=None,
        description="hash of the traffic: the spec and the resolved contents of its profiles and "
        "topologies (equal hashes: the same requests)",
    )
    workload_digests: dict[str, str] = Field(
        default_factory=dict, description="digest of each resolved profile and topology, by 'profile NAME'"
    )
    targets: list[TargetInfo] = Field(default_factory=list)
    workers: list[WorkerInfo] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict, description="requests by status")
    records_lost: int = Field(
        default=0, description="requests made but not written to the trace (it could not be written)"
    )
    records_lost_with_workers: int = Field(
        default=0,
        description="requests sent by workers that were lost (their node gone) whose records never reached "
        "the driver or a closed part",
    )
    requests_sent: int = Field(
        default=0,
        description="requests sent: the rows in the trace plus records_lost plus records_lost_with_workers",
    )
    parts: list[str] = Field(default_factory=list)
    server_metrics: str | None = Field(
        default=None, description="file of the targets' scraped Prometheus samples, if any were had"
    )
    versions: dict[str, str] = Field(default_factory=dict)
    simulated: dict[str, Any] | None = Field(
        default=None,
        description="for a simulated run (swarm simulate): the clock (virtual), each twin's settings, "
        "its replicas and routing policy; None for a measured run",
    )
    replay_of: dict[str, Any] | None = Field(
        default=None, description="for a replay: the source (path, format, run id), mode, speed, filters"
    )

    def write(self, run_dir: str | os.PathLike[str] | RunStorage) -> None:
        """Write atomically (temp file + move) so readers never see half a manifest."""
        storage = run_dir if isinstance(run_dir, RunStorage) else RunStorage.at(run_dir)
        storage.write_bytes(MANIFEST_NAME, (self.model_dump_json(indent=2) + "\n").encode("utf-8"))

    @classmethod
    def read(cls, run_dir: str | os.PathLike[str] | RunStorage) -> RunManifest:
        storage = run_dir if isinstance(run_dir, RunStorage) else RunStorage.at(run_dir)
        where = storage.path(MANIFEST_NAME)
        try:
            data = json.loads(storage.read_bytes(MANIFEST_NAME).decode("utf-8"))
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{where}: no manifest (is this a run directory?)") from exc
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON: {exc}") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"{where}: not UTF-8 text: {exc}") from None
        if not isinstance(data, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors()[:3]
            )
            raise InputError(f"{where}: not a swarm run manifest: {problems}") from None


def changed_contents(*digests: dict[str, str]) -> list[str]:
    """The profiles and topologies (``"profile NAME"``) whose digests differ between the given
    ``content_digests`` (one present in some and not others counts as changed), sorted."""
    keys = set().union(*digests)
    return sorted(k for k in keys if len({d.get(k) for d in digests}) > 1)


def new_run_id(now: dt.datetime | None = None) -> str:
    """A sortable, unique run id: ``YYYYmmdd-HHMMSS-xxxxxx``."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def versions() -> dict[str, str]:
    """Versions of swarm and the libraries that shape its measurements."""
    from importlib import metadata

    out: dict[str, str] = {}
    for dist in ("swarm-loadgen", "aiohttp", "pyarrow", "numpy", "ray"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    import platform

    out["python"] = platform.python_version()
    return out
