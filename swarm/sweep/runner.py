"""``swarm sweep`` as a library call: every target at every load of a ladder, resumable.

Place in the map (docs/architecture.md, "Sweeps"): above ``launch``. ``execute_sweep`` opens
(or, for the same definition, resumes) a sweep folder, starts the emulators (no target given)
and the executor once for the whole sweep, and for each load in order and each target in
order: empties the target's prefix cache (``cache_reset``), runs one point
(``PointLauncher.run_point``: a run folder under ``runs/``), reads its figures back
(``sweep.report.point_result``) and rewrites ``sweep.json``. A (point, target) whose
run is complete or stopped is skipped on a re-run; one that was killed or interrupted is run
again in a new run folder (the old attempt stays listed).

An auto ladder climbs until every target has met a stop rule (``stop_rule``) or the ladder's
limits; a target that met one is not measured at higher loads. A target whose point fails (it
cannot be reached, or its run failed) is recorded as failed at that load and not measured
further; the others go on, and the sweep ends ``stopped`` saying which failed (a re-run tries
the failed point again).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm import __version__
from swarm.analysis import metrics as m
from swarm.clients.client import redact_url
from swarm.errors import InputError
from swarm.runtime.cache_reset import reset_prefix_cache
from swarm.runtime.context import TargetOutcome, TargetRun
from swarm.runtime.executor import Executor
from swarm.runtime.specs import TargetSpec
from swarm.runtime.targets import embedded_targets, resolve_targets
from swarm.sim.executor import twin_targets
from swarm.sim.spec import SimulationSpec
from swarm.sweep.manifest import SWEEP_MANIFEST_NAME, PointRun, SweepManifest
from swarm.sweep.points import PointLauncher
from swarm.sweep.report import PointResult, point_result, slo_bounds
from swarm.sweep.spec import StopRules, SweepSpec, definition_digest, format_load
from swarm.trace.manifest import RunStatus

log = logging.getLogger(__name__)

#: the emulator's prefix-cache size when ``--cache-tokens`` is not among its arguments
EMULATOR_DEFAULT_CACHE_TOKENS = 400_000


@dataclass
class SweepEvent:
    """Progress of a sweep, for the caller's display: ``kind`` is ``start`` (a point begins),
    ``skip`` (done on an earlier run), ``done`` (with its result) or ``stop`` (a target stops
    climbing, ``reason``)."""

    kind: str
    index: int
    load: float
    target: str
    result: PointResult | None = None
    reason: str | None = None
    run_dir: str | None = None


@dataclass
class SweepResult:
    folder: str
    manifest: SweepManifest
    results: dict[str, list[PointResult]] = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        return self.manifest.status == RunStatus.INTERRUPTED.value


class _HeldExecutor:
    """The sweep's executor, entered once: each point's run frame enters and leaves this
    wrapper, which leaves the executor (Ray and its workers) running between points."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner

    def __enter__(self) -> _HeldExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run_target(self, run: TargetRun) -> TargetOutcome:
        return self.inner.run_target(run)


def stop_rule(history: list[PointResult], rules: StopRules, slo: m.SLO | None, percentile: str) -> str | None:
    """The first stop rule the last point of ``history`` (one target, ascending load) meets:
    its error share above ``max_error_rate``; the generator behind its schedule, or the client
    behind the kernel's receive stamps (``metrics.client_lag_flag``); an SLO
    figure above its bound times ``slo_factor``; output tokens/s not above the best earlier
    valid point's times ``1 + min_gain``. None when it meets none."""
    if not history:
        return None
    last = history[-1]
    f = last.figures
    if f.error_rate is not None and f.error_rate > rules.max_error_rate:
        return f"error share {f.error_rate:.1%} above {rules.max_error_rate:.1%}"
    behind = [r for r in last.validity.reasons if "behind its schedule" in r or "behind the kernel" in r]
    if rules.stop_when_behind and behind:
        return behind[0]
    flat = f.flat()
    for bound in slo_bounds(slo, percentile) if slo else []:
        value = flat.get(bound.figure)
        if value is not None and value > bound.limit * rules.slo_factor:
            return f"{bound.figure} {value:.4g} above {rules.slo_factor:g} x its SLO {bound.limit:g}"
    earlier = [
        p.figures.output_tokens_per_s
        for p in history[:-1]
        if p.validity.valid and p.figures.output_tokens_per_s is not None
    ]
    now = f.output_tokens_per_s
    if earlier and now is not None and now <= max(earlier) * (1 + rules.min_gain):
        return (
            f"output tokens/s no longer rising: {now:.4g} vs best earlier {max(earlier):.4g} "
            f"(less than +{rules.min_gain:.0%})"
        )
    return None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "target"


def _emulator_budget(args: list[str]) -> int | None:
    """The emulators' prefix-cache size from their arguments; None when unbounded (0)."""
    value: int = EMULATOR_DEFAULT_CACHE_TOKENS
    for i, arg in enumerate(args):
        if arg.startswith("--cache-tokens="):
            value = int(arg.split("=", 1)[1])
        elif arg == "--cache-tokens" and i + 1 < len(args):
            value = int(args[i + 1])
    return value or None


def default_folder(digest: str, output_root: str = "sweeps") -> str:
    return f"{output_root.rstrip('/')}/sweep-{digest}"


def _open_manifest(folder: Path, fresh: SweepManifest) -> SweepManifest:
    """The folder's manifest when it holds the same sweep (resume), else a new one; a folder
    holding another sweep is an error naming the folder."""
    if not (folder / SWEEP_MANIFEST_NAME).exists():
        if folder.exists() and any(folder.iterdir()):
            raise InputError(f"{folder}: exists and is not a sweep folder; choose another --output")
        folder.mkdir(parents=True, exist_ok=True)
        return fresh
    old = SweepManifest.read(str(folder))
    if old.definition_digest != fresh.definition_digest:
        raise InputError(
            f"{folder}: holds another sweep (definition {old.definition_digest}, this one "
            f"{fresh.definition_digest}); re-run its own command to resume it, or choose another --output"
        )
    old.status, old.status_reason, old.finished_at = "running", None, None
    old.targets = fresh.targets
    return old


def _definition(
    spec: SweepSpec, launcher: PointLauncher, targets: list[TargetSpec], args: list[str]
) -> dict[str, Any]:
    """What the sweep measures (its digest names the folder): the knob and ladder, the base,
    the targets without credentials (or the emulators' arguments)."""
    return {
        "kind": launcher.kind,
        "sweep": spec.measured_part(),
        "base": launcher.definition(),
        "targets": [
            {**t.model_dump(mode="json", exclude={"api_key_env", "api_key_file"}), "url": redact_url(t.url)}
            for t in targets
        ]
        or {"emulators": args},
    }


def _manifest_for(
    folder: Path, spec: SweepSpec, launcher: PointLauncher, definition: dict[str, Any], names: list[str],
    budget: int | None,
) -> SweepManifest:  # fmt: skip
    """The folder's manifest (a new sweep's, or the one it resumes), with this run's judging
    settings (they may change on a re-run), written."""
    manifest = _open_manifest(
        folder,
        SweepManifest(
            sweep_id=folder.name, swarm_version=__version__, kind=launcher.kind, knob=spec.knob,
            ladder=list(spec.loads), auto=spec.auto.model_dump(mode="json") if spec.auto else None,
            stop_rules=spec.stop.model_dump(mode="json"), slos=list(spec.slos),
            steady_fraction=spec.steady_fraction, cliff_fraction=spec.cliff_fraction,
            kv_budget_tokens=budget, definition_digest=definition_digest(definition), definition=definition,
            targets=names, seed=launcher.seed, created_at=dt.datetime.now(dt.timezone.utc).isoformat(),
        ),
    )  # fmt: skip
    # what only judges the points may change on a re-run: this run's settings stand
    manifest.slos, manifest.steady_fraction = list(spec.slos), spec.steady_fraction
    manifest.cliff_fraction, manifest.kv_budget_tokens = spec.cliff_fraction, budget
    manifest.definition["analysis"] = {"slo_percentile": spec.slo_percentile}
    manifest.write(str(folder))
    return manifest


@dataclass
class _Climb:
    """The sweep's walk up its ladder: which targets stopped climbing, and why."""

    spec: SweepSpec
    manifest: SweepManifest
    folder: Path
    result: SweepResult
    emit: Callable[[SweepEvent], None]
    slo: m.SLO | None
    stopped: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)

    def failed_at(self, index: int, load: float, target: str, exc: Exception) -> None:
        """A point that could not run: the target is measured no further, the others go on."""
        why = f"failed at {self.spec.knob}={format_load(load)}: {exc}"
        log.error("target %s %s", target, why)
        latest = self.manifest.latest(index, target)
        if latest is not None and not latest.done:
            latest.status, latest.status_reason = RunStatus.FAILED.value, str(exc)
        self.stopped[target] = why
        self.failed.append(f"{target} {why}")
        self.emit(SweepEvent("stop", index, load, target, reason=why))

    def measured(self, index: int, load: float, target: str, outcome: PointResult) -> None:
        """A point's figures; an auto ladder asks the stop rules whether the target climbs on."""
        self.result.results[target].append(outcome)
        if self.spec.auto is None:
            return
        reason = stop_rule(self.result.results[target], self.spec.stop, self.slo, self.spec.slo_percentile)
        if reason:
            self.stopped[target] = f"at {self.spec.knob}={format_load(load)}: {reason}"
            latest = self.manifest.latest(index, target)
            if latest is not None:
                latest.stop_rule = reason
            self.emit(SweepEvent("stop", index, load, target, outcome, reason))

    def finished(self, names: list[str]) -> None:
        self.manifest.status = RunStatus.STOPPED.value if self.failed else RunStatus.COMPLETE.value
        self.manifest.status_reason = "; ".join(self.failed) or None
        if self.spec.auto is not None:
            left = {n: "the ladder's limits (max points or max load)" for n in names if n not in self.stopped}
            self.stopped.update(left)


def execute_sweep(
    spec: SweepSpec,
    launcher: PointLauncher,
    targets: list[TargetSpec],
    executor: Executor,
    *,
    emulator_args: list[str] | None = None,
    output_root: str = "sweeps",
    on_event: Callable[[SweepEvent], None] | None = None,
    simulation: SimulationSpec | None = None,
) -> SweepResult:
    """Run (or resume) the sweep; returns its folder, final manifest and every point's figures.
    ``simulation``: the targets are its twins, simulated (the launcher's points say so too)."""
    launcher.check_knob(spec.knob, list(spec.loads))
    args = list(emulator_args or [])
    definition = _definition(spec, launcher, targets, args)
    folder = Path(spec.output or default_folder(definition_digest(definition), output_root))
    slo = m.parse_slos(spec.slos) if spec.slos else None
    emit = on_event or (lambda event: None)
    with contextlib.ExitStack() as stack:
        if simulation is not None:
            twins = twin_targets(simulation)
            specs = [TargetSpec(name=t.name, url=t.url, engine=t.engine) for t in twins]
            resolved = {t.name: t for t in twins}
        else:
            specs = targets or stack.enter_context(embedded_targets(args))
            resolved = {t.name: t for t in resolve_targets(specs)}
        names = [t.name for t in specs]
        budget = spec.kv_budget_tokens
        if budget is None and not targets:
            budget = _emulator_budget(args)
        manifest = _manifest_for(folder, spec, launcher, definition, names, budget)
        held = _HeldExecutor(stack.enter_context(executor))
        result = SweepResult(folder=str(folder), manifest=manifest, results={n: [] for n in names})
        climb = _Climb(spec, manifest, folder, result, emit, slo)
        try:
            index = 0
            while (load := spec.load(index)) is not None and len(climb.stopped) < len(names):
                for target in specs:
                    if target.name in climb.stopped:
                        continue
                    try:
                        outcome = _run_one(
                            spec, launcher, folder, manifest, held, target, resolved[target.name], index,
                            load, slo, emit,
                        )  # fmt: skip
                    except (InputError, OSError) as exc:  # this target failed here; the others go on
                        climb.failed_at(index, load, target.name, exc)
                        manifest.write(str(folder))
                        continue
                    if outcome is None:  # interrupted
                        manifest.status = RunStatus.INTERRUPTED.value
                        manifest.status_reason = f"interrupted at {spec.knob}={format_load(load)} on {target.name}"
                        return result
                    climb.measured(index, load, target.name, outcome)
                    manifest.write(str(folder))
                index += 1
            climb.finished(names)
        except KeyboardInterrupt:
            manifest.status = RunStatus.INTERRUPTED.value
            manifest.status_reason = "interrupted (KeyboardInterrupt)"
            raise
        except BaseException as exc:
            manifest.status = RunStatus.FAILED.value
            manifest.status_reason = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            manifest.stopped_by = climb.stopped
            manifest.finished_at = dt.datetime.now(dt.timezone.utc).isoformat()
            manifest.write(str(folder))
    return result


def _run_one(
    spec: SweepSpec,
    launcher: PointLauncher,
    folder: Path,
    manifest: SweepManifest,
    executor: Executor,
    target: TargetSpec,
    resolved: Any,
    index: int,
    load: float,
    slo: m.SLO | None,
    emit: Callable[[SweepEvent], None],
) -> PointResult | None:
    """One (point, target): skipped when done before, else run. None when interrupted."""

    def figures(run_dir: str) -> PointResult:
        return point_result(
            folder / run_dir, index=index, load=load, target=target.name, slo=slo,
            steady_fraction=spec.steady_fraction, max_error_rate=spec.stop.max_error_rate,
        )  # fmt: skip

    prior = manifest.latest(index, target.name)
    if prior is not None and prior.done and (folder / prior.run_dir).exists():
        emit(SweepEvent("skip", index, load, target.name, run_dir=prior.run_dir))
        return figures(prior.run_dir)
    parent = f"runs/p{index:02d}-{format_load(load)}-{_safe(target.name)}"
    if resolved.simulated:
        reset = "simulated (fresh twins)"
    else:
        reset = reset_prefix_cache(resolved) if spec.reset_cache else "not asked"
    entry = PointRun(index=index, load=load, target=target.name, run_dir=parent, cache_reset=reset)
    manifest.points.append(entry)
    manifest.write(str(folder))
    emit(SweepEvent("start", index, load, target.name))
    run = launcher.run_point(spec.knob, load, target, executor, str(folder / parent))
    entry.run_dir = str(Path(run.run_dir).relative_to(folder))
    entry.status = run.manifest.status.value
    entry.status_reason = run.manifest.status_reason
    manifest.write(str(folder))
    if run.interrupted:
        return None
    if not entry.done:
        raise InputError(f"{entry.run_dir}: the point's run {entry.status}: {entry.status_reason}")
    outcome = figures(entry.run_dir)
    emit(SweepEvent("done", index, load, target.name, outcome, run_dir=entry.run_dir))
    return outcome
