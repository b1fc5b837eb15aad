"""The specs of a run: targets, timeouts, and the whole RunSpec that ``swarm run`` builds.

Place in the map (docs/architecture.md, "Runtime"): pydantic models, the single source of truth for
what a run file or the CLI may say; ``launch.execute_run`` runs one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from swarm.request import Timeouts
from swarm.workload.workload import WorkloadSpec


class TargetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="label in the trace's `target` column")
    url: str = Field(description="base URL of the server")
    engine: str | None = Field(default=None, description="engine profile; detected when absent")
    dialect: str | None = Field(default=None, description="API dialect; the engine's default when absent")
    model: str | None = Field(default=None, description="model name; the server's first when absent")
    api_key_env: str | None = Field(default=None, description="environment variable holding the API key")
    api_key_file: str | None = Field(default=None, description="file holding the API key (its first line)")


class TimeoutSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    connect_s: float | None = Field(default=10.0, gt=0, description="connecting, seconds")
    first_token_s: float | None = Field(default=120.0, gt=0, description="from sending to the first token")
    total_s: float | None = Field(default=600.0, gt=0, description="a whole request")
    idle_s: float | None = Field(default=60.0, gt=0, description="longest silence mid-stream")


class RunSpec(BaseModel):
    """Everything ``swarm run`` needs: a workload, targets, and where to write."""

    model_config = ConfigDict(extra="forbid")

    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    targets: list[TargetSpec] = Field(default_factory=list, description="none: the emulator in both profiles")
    output_dir: str = Field(default="runs", description="run folders are created here")
    record_text: bool = Field(default=False, description="store prompt parts and outputs in the trace")
    executor: Literal["ray", "inprocess"] = Field(
        default="ray",
        description="ray: async Ray actors (a local Ray when no address); inprocess: one process",
    )
    workers: int | None = Field(default=None, ge=1, description="Ray workers (default: CPUs less one)")
    address: str | None = Field(
        default=None, description="Ray cluster: auto, ray://host:port (default: RAY_ADDRESS or local)"
    )
    worker_writes: bool = Field(
        default=False,
        description="Ray workers write their Parquet parts to output_dir themselves (shared storage)",
    )
    ray_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="starting a local Ray or joining a cluster may take this long, seconds",
    )
    timeouts: TimeoutSpec = Field(default_factory=TimeoutSpec)
    max_error_rate: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="circuit breaker: stop sending to a target when this share of the last "
        "error_window requests failed (the reason goes to the manifest); off when absent",
    )
    error_window: int = Field(default=100, ge=1, description="requests the circuit breaker looks back over")
    metrics_interval_s: float = Field(
        default=1.0, ge=0, description="scrape the targets' Prometheus metrics this often, seconds; 0: never"
    )
    flush_interval_s: float = Field(
        default=10.0, gt=0, description="trace parts are closed at least this often: what a kill -9 can lose"
    )
    emulator_args: list[str] = Field(
        default_factory=list, description="extra `swarm emulate` flags for the embedded emulators"
    )


def timeouts_of(spec: TimeoutSpec) -> Timeouts:
    return Timeouts(spec.connect_s, spec.first_token_s, spec.total_s, spec.idle_s)
