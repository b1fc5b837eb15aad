"""``swarm run`` and ``swarm topologies``: flags to a RunSpec, a live view, a final summary.

Place in the map (docs/architecture.md): part of the CLI (the only place that knows rich's live display).
The command builds a ``RunSpec`` from ``--spec`` and flags and calls ``runtime.launch.execute_run``;
``swarm replay`` builds a ReplayPlan and calls ``runtime.launch.execute_replay``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from swarm.cli_report import summary_table
from swarm.errors import InputError
from swarm.live_stats import RunStats, behind_schedule


def _fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


class LiveView:
    """What the terminal shows while a target runs (refreshed by rich's own thread)."""

    def __init__(self, total_agents: int) -> None:
        self.total_agents = total_agents
        self.rows: list[tuple[str, RunStats, float, float | None]] = []
        self._last: tuple[float, int] = (time.monotonic(), 0)
        self._rate = 0.0

    def start_target(self, name: str, stats: RunStats) -> None:
        if self.rows:
            name0, st0, t0, _ = self.rows[-1]
            self.rows[-1] = (name0, st0, t0, time.monotonic())
        self.rows.append((name, stats, time.monotonic(), None))
        self._last = (time.monotonic(), 0)

    def __rich__(self) -> Table:
        table = Table(title="swarm run", expand=False)
        for col in (
            "target",
            "elapsed",
            "agents",
            "requests",
            "in flight",
            "errors",
            "out tok/s",
            "TTFT p50",
            "TTFT p99",
            "cache hit",
            "ideal",
            "lag p99",
            "late",
        ):
            table.add_column(col, justify="right" if col != "target" else "left")
        now = time.monotonic()
        for i, (name, st, t0, t1) in enumerate(self.rows):
            snap = st.snapshot()
            elapsed = (t1 or now) - t0
            if i == len(self.rows) - 1 and t1 is None and not st.finished:
                last_t, last_tokens = self._last  # while sending: the rate over the last second
                if now - last_t >= 1.0:
                    self._rate = (st.completion_tokens - last_tokens) / (now - last_t)
                    self._last = (now, st.completion_tokens)
                rate = self._rate
            else:  # once sending has stopped: the run's average
                if st.finished and t1 is None:
                    t1 = now
                    self.rows[i] = (name, st, t0, t1)
                    elapsed = t1 - t0
                rate = st.completion_tokens / elapsed if elapsed > 0 else 0.0
            agents = f"{snap['agents_done']}/{snap['agents_started']}/{self.total_agents}"
            if snap["agents_cut"]:
                agents += f" ({snap['agents_cut']} cut)"
            errors = str(snap["errors"]) + (f" (+{snap['cancelled']} cancelled)" if snap["cancelled"] else "")
            table.add_row(
                name,
                f"{elapsed:.0f}s",
                agents,
                str(snap["requests"]),
                str(snap["in_flight"]),
                Text(errors, style="red" if snap["errors"] else ""),
                f"{rate:,.0f}",
                _fmt(snap["ttft_p50_ms"], ".0f", " ms"),
                _fmt(snap["ttft_p99_ms"], ".0f", " ms"),
                _fmt(None if snap["cache_hit_ratio"] is None else 100 * snap["cache_hit_ratio"], ".1f", "%"),
                _fmt(None if snap["ideal_hit_ratio"] is None else 100 * snap["ideal_hit_ratio"], ".1f", "%"),
                _fmt(snap["lag_p99_ms"], ".0f", " ms"),
                Text(str(snap["late"]), style="bold yellow" if snap["late"] else ""),
            )
        table.caption = (
            "agents: done/started/total (cut short by a stop); cache hit: server-reported cached/prompt "
            "tokens; ideal: longest shared prefix; lag: sent minus due, less any wait for the in-flight "
            "cap; late: lag > 10 ms (the generator is behind)"
        )
        if any(behind_schedule(st) for _, st, _, _ in self.rows):
            table.caption += "\n[bold yellow]the generator is behind its schedule: see late / lag p99[/]"
        return table


class LiveDisplay:
    """The live view, shown from the first target's start: the input is checked, the targets
    probed and Ray started before it, so an error there is never printed under an empty table."""

    def __init__(self, view: LiveView, console: Console, enabled: bool) -> None:
        self.view = view
        self.console = console
        self.enabled = enabled
        self._live: Live | None = None

    def start_target(self, name: str, stats: RunStats) -> None:
        self.view.start_target(name, stats)
        if self.enabled and self._live is None:
            self._live = Live(self.view, console=self.console, refresh_per_second=2, transient=False)
            self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()


def parse_targets(
    targets: list[str],
    engines: list[str],
    dialect: str | None,
    model: str | None,
    api_key_env: str | None,
    api_key_file: str | None = None,
) -> list[dict[str, Any]]:
    out = []
    if engines and len(engines) not in (1, len(targets)):
        raise InputError(
            f"--engine given {len(engines)} times for {len(targets)} targets: give one, or one per target"
        )
    if engines and not targets:
        raise InputError(
            "--engine needs --target NAME=URL (with no target, swarm runs its emulator in both profiles)"
        )
    for i, t in enumerate(targets):
        name, sep, url = t.partition("=")
        if not sep or not name or not url:
            raise InputError(f"--target {t!r}: expected NAME=URL, e.g. sglang=http://127.0.0.1:30000")
        engine = engines[i if len(engines) > 1 else 0] if engines else None
        out.append(
            {
                "name": name,
                "url": url,
                "engine": engine,
                "dialect": dialect,
                "model": model,
                "api_key_env": api_key_env,
                "api_key_file": api_key_file,
            }
        )
    return out


#: Exit codes of ``swarm run`` / ``swarm replay`` by how the run ended (2 is bad input).
EXIT_CODES = {"complete": 0, "failed": 1, "stopped": 3, "interrupted": 130}


def finish_code(manifest: Any, console: Console) -> int:
    """Say why a run did not complete (on ``console``) and return the run's exit code."""
    status = manifest.status.value
    if status != "complete" and manifest.status_reason:
        console.print(
            f"[bold yellow]run {status}:[/] {manifest.status_reason}", highlight=False, soft_wrap=True
        )
    return EXIT_CODES.get(status, 1)


def run_command(
    spec_data: dict[str, Any], show_progress: bool, json_out: bool, source: str = "run spec"
) -> int:
    """Build the RunSpec, run it with a live view, print the summary; returns the exit code."""
    import json

    from swarm.runtime.context import ResolvedTarget
    from swarm.runtime.launch import execute_run, summary_rows
    from swarm.runtime.specs import RunSpec
    from swarm.specfiles import validate

    spec = validate(RunSpec, spec_data, source)
    console = Console(stderr=json_out, width=None if sys.stdout.isatty() else 160)
    display = LiveDisplay(LiveView(spec.workload.agents), console, show_progress)

    def on_target_start(target: ResolvedTarget, stats: RunStats) -> None:
        display.start_target(target.name, stats)

    try:
        result = execute_run(spec, on_target_start=on_target_start, source=source)
    finally:
        display.stop()
    summary = summary_rows(result.run_dir)
    emulated = {t.name for t in result.manifest.targets if t.emulated}
    if json_out:
        print(
            json.dumps(
                {
                    "run_dir": str(result.run_dir),
                    "status": result.manifest.status.value,
                    "status_reason": result.manifest.status_reason,
                    "targets": summary,
                    "not_run": [t.name for t in result.manifest.targets if t.outcome == "not_run"],
                },
                indent=2,
            )
        )
    else:
        console.print(summary_table(summary, emulated))
        for t in result.manifest.targets:
            if (why := t.shortfall()) is not None:
                console.print(f"[yellow]{t.name}:[/] {why}", highlight=False, soft_wrap=True)
        if emulated:
            console.print(
                "[dim]figures from swarm's engine emulator, a model of an engine - not measurements of one[/dim]"
            )
        console.print(f"trace: {result.run_dir}  (status: {result.manifest.status.value})")
    return finish_code(result.manifest, console)


def topologies_command(name: str | None, topologies_dir: list[Path]) -> None:
    from swarm.catalog import Catalog
    from swarm.topology import render_ascii

    catalog = Catalog(topology_dirs=topologies_dir)
    console = Console()
    if name is None:
        table = Table(title="topologies")
        for col in ("name", "calls (template)", "description"):
            table.add_column(col)
        from swarm.specfiles import load_yaml

        for n in catalog.topology_names():
            t = catalog.topology(n)
            path = next((d / f"{n}.yaml" for d in catalog.topology_dirs if (d / f"{n}.yaml").is_file()), None)
            desc = (load_yaml(path) or {}).get("description", "") if path else ""
            table.add_row(n, str(t.graph.number_of_nodes()), desc)
        console.print(table)
        console.print("show one: swarm topologies NAME")
        return
    t = catalog.topology(name)
    console.print(
        Group(Text(f"{t.name}: {t.graph.number_of_nodes()} calls in the template"), Text(render_ascii(t)))
    )


def detect_format(source: str) -> str:
    """swarm (a run folder), mooncake (.jsonl), azure or burstgpt (.csv, by header)."""
    path = Path(source)
    if "://" in source or path.is_dir():
        return "swarm"
    if path.suffix in (".jsonl", ".json"):
        return "mooncake"
    if path.suffix == ".csv" and path.is_file():
        with path.open(encoding="utf-8") as f:
            header = f.readline()
        if "ContextTokens" in header:
            return "azure"
        if "Request tokens" in header:
            return "burstgpt"
    raise InputError(f"{source}: cannot tell the trace format; pass --format swarm|mooncake|azure|burstgpt")


def replay_command(
    *, source: str, fmt: str | None, mode: str | None, speed: float, limit: int | None, window: str | None,
    sample: float | None, seed: int, skip_bad_lines: bool, source_target: str | None, targets: list[str],
    engines: list[str], dialect: str | None, model: str | None, api_key_env: str | None,
    api_key_file: str | None = None, max_error_rate: float | None = None, error_window: int = 100,
    max_in_flight: int, sessions: int = 1, max_sessions: int = 0, tokenizer: str | None = None,
    retries: int = 0, retry_backoff_s: float = 0.5, settings: dict[str, Any] | None = None,
    output: str, record_text: bool, emulator_args: list[str], show_progress: bool, json_out: bool,
) -> int:  # fmt: skip
    """``settings``: the RunSpec fields a replay shares with runs (executor, workers, address,
    ray_timeout_s, worker_writes, timeouts, metrics and flush intervals)."""
    import json

    from swarm.replay.importers import Filters, import_trace, parse_window
    from swarm.runtime.context import ResolvedTarget
    from swarm.runtime.launch import execute_replay, make_executor, summary_rows
    from swarm.runtime.replay_source import MODES
    from swarm.runtime.specs import RunSpec, TargetSpec
    from swarm.specfiles import validate
    from swarm.tokenizer import get_tokenizer

    if mode is not None and mode not in MODES:
        raise InputError(f"--mode {mode!r}: expected timed or dependent")
    if speed <= 0:
        raise InputError("--speed must be positive")
    if sample is not None and not 0 < sample <= 1:
        raise InputError("--sample must be a fraction in (0, 1]")
    if limit is not None and limit < 1:
        raise InputError("--limit must be at least 1")
    if max_error_rate is not None and not 0 < max_error_rate <= 1:
        raise InputError("--max-error-rate must be a share in (0, 1]")
    if error_window < 1:
        raise InputError("--error-window must be at least 1")
    if sessions < 1:
        raise InputError("--sessions must be at least 1")
    if max_sessions < 0:
        raise InputError("--max-sessions must be 0 (no limit) or more")
    if retries < 0 or retry_backoff_s < 0:
        raise InputError("--retries and --retry-backoff must not be negative")
    spec = validate(RunSpec, {**(settings or {}), "output_dir": output}, "replay flags")
    chosen_tokenizer = get_tokenizer(tokenizer)
    fmt = fmt or detect_format(source)
    filters: dict[str, Any] = {"limit": limit, "window": window, "sample": sample, "seed": seed}
    if fmt == "swarm":
        if limit or window or sample:
            raise InputError("--limit, --window and --sample apply to trace files, not to run folders")
        from swarm.replay.from_run import plan_from_run

        plan = plan_from_run(source, source_target)
    else:
        plan = import_trace(
            source, fmt, Filters(limit=limit, window=parse_window(window), sample=sample, seed=seed),
            skip_bad_lines=skip_bad_lines,
        )  # fmt: skip
    target_specs = [
        TargetSpec(**t) for t in parse_targets(targets, engines, dialect, model, api_key_env, api_key_file)
    ]
    console = Console(stderr=json_out, width=None if sys.stdout.isatty() else 160)
    for note in plan.notes:
        console.print(f"[yellow]{note}[/yellow]")
    display = LiveDisplay(LiveView(len(plan.items) * sessions), console, show_progress)

    def on_target_start(target: ResolvedTarget, stats: RunStats) -> None:
        display.start_target(target.name, stats)

    try:
        result = execute_replay(
            plan, target_specs, mode=mode, speed=speed, copies=sessions, max_sessions=max_sessions,
            max_in_flight=max_in_flight, tokenizer=chosen_tokenizer, retries=retries,
            retry_backoff_s=retry_backoff_s, output_dir=output,
            record_text=record_text, emulator_args=emulator_args, filters=filters, on_target_start=on_target_start,
            max_error_rate=max_error_rate, error_window=error_window, spec=spec,
            executor=make_executor(
                spec.executor, workers=spec.workers, address=spec.address, worker_writes=spec.worker_writes,
                ray_timeout_s=spec.ray_timeout_s, flush_interval_s=spec.flush_interval_s,
            ),
        )  # fmt: skip
    finally:
        display.stop()
    summary = summary_rows(result.run_dir)
    if json_out:
        print(
            json.dumps(
                {
                    "run_dir": result.run_dir,
                    "status": result.manifest.status.value,
                    "status_reason": result.manifest.status_reason,
                    "replay_of": result.manifest.replay_of,
                    "targets": summary,
                },
                indent=2,
            )
        )
    else:
        emulated = {t.name for t in result.manifest.targets if t.emulated}
        console.print(summary_table(summary, emulated))
        console.print(
            f"replay of {plan.source} ({plan.source_format}, {len(plan.items)} requests): {result.run_dir}  (status: {result.manifest.status.value})"
        )
    return finish_code(result.manifest, console)
