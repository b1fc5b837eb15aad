"""The CLI's own settings: what a command prints or writes, and a sweep's ladder.

Place in the map (docs/architecture.md, "CLI"): pydantic models like the library's settings, read
only by the flag table's generator (``cli/flagspec.py``) and by the commands that route these
flags themselves; they are not part of any spec file.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from swarm.cliflag import flag


class OutputOptions(BaseModel):
    """What every command that sends or reports takes for its output."""

    model_config = ConfigDict(extra="forbid")

    spec: Path | None = Field(
        default=None,
        description="a spec YAML (run and sweep: workload:, targets:, ...; replay: replay:, targets:, ...); "
        "flags override it",
        json_schema_extra=flag("--spec", group="Output", metavar="FILE"),
    )
    output: str | None = Field(
        default=None,
        description="where this command writes what it makes: run and replay, the folder (or URI) run "
        "folders are made in (default runs); sweep, the sweep's folder (default "
        "sweeps/sweep-<digest>; re-run to resume); export, fit, report, compare, realism and probe, "
        "the file (default: standard output; fit: required, the spec .yaml; calibrate: required, "
        "the calibration .yaml)",
        json_schema_extra=flag("--output", group="Output", short="-o", metavar="PATH"),
    )
    json_out: bool = Field(
        default=False,
        description="print the result (summary, report, comparison) as JSON instead of tables",
        json_schema_extra=flag("--json", group="Output", negatable=False),
    )
    progress: bool = Field(
        default=True,
        description="show progress while sending (a live view; a sweep's lines per point)",
        json_schema_extra=flag("--progress", group="Output"),
    )
    html: Path | None = Field(
        default=None,
        description="also write the result as one self-contained HTML page with plots",
        json_schema_extra=flag("--html", group="Output", metavar="FILE"),
    )
    slo: list[str] = Field(
        default_factory=list,
        description="an SLO, NAME:VALUE, e.g. --slo ttft:500ms --slo itl:50ms (goodput; a sweep's capacity)",
        json_schema_extra=flag("--slo", group="Output", repeat=True),
    )


class SweepOptions(BaseModel):
    """How ``swarm sweep`` is told its ladder and its base."""

    model_config = ConfigDict(extra="forbid")

    ladder: str | None = Field(
        default=None,
        description="the load knob and its loads, KNOB=V1,V2,...: agents, max_in_flight or rate for "
        "a swarm; max_sessions, max_in_flight or speed for a replay; with --simulate also replicas, "
        "each twin's fleet (default: agents=4,8,16,32,64, the emulated showdown); with --auto, KNOB=START",
        json_schema_extra=flag("--ladder", group="Sweep", metavar="KNOB=LOADS"),
    )
    auto: bool = Field(
        default=False,
        description="grow the knob from its one value until a stop rule fires",
        json_schema_extra=flag("--auto", group="Sweep", negatable=False),
    )
    replay: str | None = Field(
        default=None,
        description="sweep a replay of this run folder or trace (its reading flags as swarm replay's; "
        "or a --spec with a replay: part)",
        json_schema_extra=flag("--replay", group="Sweep", metavar="SOURCE"),
    )


class SimulateOption(BaseModel):
    """``--simulate`` of ``swarm sweep`` and ``swarm replay``: what they send, in virtual time."""

    model_config = ConfigDict(extra="forbid")

    simulate: bool = Field(
        default=False,
        description="send in virtual time to engine twins (as swarm simulate: --engine, --emulator-arg, "
        "--fleet, --routing), not over HTTP; sweep: every point",
        json_schema_extra=flag("--simulate", group="Simulation", negatable=False),
    )


class CalibrateOptions(BaseModel):
    """How long ``swarm calibrate`` may probe."""

    model_config = ConfigDict(extra="forbid")

    budget_s: float = Field(
        default=300.0, gt=0, le=3600,
        description="seconds the probe may take at most; it ends early with what it measured",
        json_schema_extra=flag("--budget", group="Output", metavar="SECONDS"),
    )  # fmt: skip
    model_config_path: Path | None = Field(
        default=None,
        description="vllm: the served model's config.json (Hugging Face), for its attention layout (a "
        "sliding window's KV groups), where the server is not on this machine; read from the model folder "
        "the server names otherwise",
        json_schema_extra=flag("--model-config", group="Output", metavar="FILE"),
    )  # fmt: skip


class EmulateOptions(BaseModel):
    """What ``swarm emulate`` takes besides the emulator's own settings."""

    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(
        default=1, ge=1, le=64,
        description="serve a fleet: this many replicas, one process each, on the port and the ones after "
        "it (each a free one with --port 0); put a router in front (swarm run --target NAME=ROUTER_URL)",
        json_schema_extra=flag("--replicas", group="Emulator"),
    )  # fmt: skip

    calibration: Path | None = Field(
        default=None,
        description="serve the twin a calibration file describes (swarm calibrate -o FILE): its "
        "engine, step model and what the server stated; flags given override it",
        json_schema_extra=flag("--calibration", group="Emulator", metavar="FILE"),
    )
