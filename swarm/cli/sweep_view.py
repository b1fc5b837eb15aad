"""A sweep on the terminal: the points table per target, the verdicts; sweeps side by side.

Place in the map (docs/architecture.md, "CLI"): renders ``sweep.report`` and
``sweep.compare`` dicts for ``swarm sweep``, ``swarm report SWEEP_DIR`` and ``swarm
compare SWEEP_A SWEEP_B`` (``--json`` prints the dict, ``--html`` writes ``sweep.html``'s page).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from swarm.analysis.report import SIMULATED_WARNING, twin_error_lines
from swarm.analysis.rows import fmt
from swarm.cli.sending import write_or_print
from swarm.errors import InputError

_SPECS = {
    "hit": ".1%",
    "ideal": ".1%",
    "hit/ideal": ".2f",
    "lost": ".0%",
    "KV use": ".1%",
    "cache use": ".0%",
    "routed away": ".0%",
    "imbalance": ".2f",
}


#: the columns printed with their interval when a point has one (all are in ``--json``)
SHOWN_INTERVALS = ("out tok/s", "TTFT p99", "hit/ideal", "goodput/s")


def sweep_tables(report: dict[str, Any]) -> list[Table]:
    """One table per target: a row per load with the headline figures."""
    from swarm.sweep.report import headline_rows

    rows = headline_rows(report)
    knob = report["sweep"]["knob"]
    tables = []
    for name, target in report["targets"].items():
        engine = target.get("engine") or "?"
        table = Table(title=f"{name} ({engine}): steady-window figures by {knob}")
        columns = list(
            dict.fromkeys(c for r in rows if r["target"] == name for c in r if c != "target" and c[0] != "_")
        ) or ["load"]
        if "valid" in columns:  # last, as it is the widest
            columns = [c for c in columns if c != "valid"] + ["valid"]
        for c in columns:
            table.add_column(c, justify="left" if c == "valid" else "right")
        for r in rows:
            if r["target"] != name:
                continue
            intervals = r.get("_intervals", {})
            if intervals:
                table.caption = "\\[low, high]: the 95 % interval over the point's repeats (bootstrap; --json has every figure's)"
            table.add_row(*[_cell(c, r.get(c), intervals.get(c) if c in SHOWN_INTERVALS else None) for c in columns])
        tables.append(table)
    return tables


def _cell(column: str, value: Any, interval: tuple[float, float] | None = None) -> str:
    """A figure as the table prints it; with its 95 % interval (a point's repeats) after it."""
    if isinstance(value, str):
        return value
    if column in ("load", "repeats"):
        return fmt(value, "g")
    spec = _SPECS.get(column, ",.1f")
    text = fmt(value, spec)
    if interval is not None:
        text += f" [{fmt(interval[0], spec)}, {fmt(interval[1], spec)}]"
    return text


def verdict_lines(report: dict[str, Any]) -> list[str]:
    """Capacity at SLO, cliffs (found and predicted), crossovers, invalid points, in words."""
    knob = report["sweep"]["knob"]
    out = []
    for name, t in report["targets"].items():
        if t.get("capacity"):
            what = f"fewest {knob} meeting the SLOs" if t["capacity"].get("fewest") else "capacity at SLO"
            out.append(f"{name}: {what} ({', '.join(report['sweep']['slos'])}): {t['capacity']['text']}")
        cliff, predicted = t.get("cliff"), t.get("predicted_cliff")
        if cliff:
            kv = cliff.get("kv_usage_there")
            out.append(
                f"{name}: eviction cliff at {knob} ~{cliff['load']:.3g} (hit/ideal below "
                f"{cliff['fraction']:g} x {cliff['base']:.2f}, between {cliff['between'][0]:g} and "
                f"{cliff['between'][1]:g}; KV usage there {fmt(kv, '.1%')}"
                + (
                    f", prefix cache {fmt(cliff['cache_usage_there'], '.0%')} full"
                    if cliff.get("cache_usage_there") is not None
                    else ""
                )
                + ")"
            )
        else:
            out.append(f"{name}: no eviction cliff in the ladder")
        if predicted and predicted.get("load") is not None:
            out.append(
                f"{name}: predicted cliff at {knob} ~{predicted['load']:.3g} (budget {predicted['budget_tokens']:,} "
                f"tokens; {predicted['shared_tokens']:,.0f} shared + {predicted['per_session_tokens']:,.0f} "
                f"per live session, measured at {knob}={predicted['from_load']:g})"
            )
        if t.get("stopped_by"):
            out.append(f"{name}: stopped climbing {t['stopped_by']}")
    fewest = any((t.get("capacity") or {}).get("fewest") for t in report["targets"].values())
    for label, ratio in report.get("capacity_ratios", {}).items():
        out.append(f"capacity ratio {label}: {ratio:.2f}x" + (f" (from the {knob} each needs)" if fewest else ""))
    for c in report.get("crossovers", []):
        out.append(
            f"crossover on {c['figure']} at {knob} ~{c['load']:.3g}: {c['leader_after']} overtakes {c['leader_before']}"
        )
    for item in report.get("invalid_points", []):
        out.append(f"invalid point (left out of the curves): {item}")
    return out


def print_sweep_report(
    folder: str, html: Path | None, as_json: bool, slos: list[str] | None = None, output: str | None = None
) -> None:
    """The sweep's report: JSON (on stdout, or into ``output``), or tables and verdicts; ``html``
    also writes the page. ``slos`` judge the points instead of the sweep's own."""
    from swarm.sweep.report import build_sweep_report

    report = build_sweep_report(folder, slos)
    if html is not None:
        from swarm.sweep.html import render_sweep_html

        html.write_text(render_sweep_html(report), encoding="utf-8")
        print(f"wrote {html}", file=sys.stderr)
    if as_json:
        write_or_print(json.dumps(report, indent=2, default=str), output)
        return
    console = Console(width=None if sys.stdout.isatty() else 200)
    s = report["sweep"]
    console.print(
        f"sweep {s['sweep_id']} ({s['kind']}, knob {s['knob']}, status {s['status']}): {s['folder']}",
        highlight=False,
    )
    console.print(f"[dim]steady window: {s['steady_rule']}[/dim]", highlight=False, soft_wrap=True)
    if s.get("simulated") is not None:
        console.print(f"[bold yellow]warning:[/] {SIMULATED_WARNING}", highlight=False, soft_wrap=True)
        for line in twin_error_lines(s["simulated"]):
            console.print(f"[bold yellow]warning:[/] {line}", highlight=False, soft_wrap=True)
    for table in sweep_tables(report):
        console.print(table)
    for line in verdict_lines(report):
        console.print(line, highlight=False, soft_wrap=True)
    for warning in report.get("warnings", []):
        console.print(f"[bold yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
    if any(name.startswith("emulator-") for name in report["targets"]):
        console.print(
            "[dim]figures from swarm's engine emulator, a model of an engine - not measurements of one[/dim]"
        )


def print_sweep_comparison(
    folders: list[str], as_json: bool, output: str | None = None, *, record_error: str | None = None
) -> None:
    from swarm.sweep.compare import compare_sweeps
    from swarm.sweep.report import build_sweep_report

    if record_error is not None and len(folders) != 2:
        raise InputError(f"--record-error takes two sweep folders (the engine's, then its twin's), not {len(folders)}")
    reports = [build_sweep_report(f) for f in folders]
    labels = [Path(f).name or f for f in folders]
    if len(set(labels)) < len(labels):
        labels = [f"{i + 1}-{label}" for i, label in enumerate(labels)]
    result = compare_sweeps(reports, labels)
    if record_error is not None:
        result["recorded"] = record_twin_error(result, folders, record_error)
    if as_json:
        write_or_print(json.dumps(result, indent=2, default=str), output)
        return
    console = Console(width=None if sys.stdout.isatty() else 200, emoji=False)
    for warning in result["warnings"]:
        console.print(f"[bold red]warning:[/] {warning}", soft_wrap=True, highlight=False)
    verdicts = Table(title=f"sweeps compared (knob {result['knob']})")
    for col in (
        "series",
        "engine",
        "capacity at SLO",
        "cliff",
        "predicted cliff",
        "peak out tok/s",
        "peak tasks/h",
    ):
        verdicts.add_column(
            col, justify="left" if col in ("series", "engine", "capacity at SLO") else "right"
        )
    for key, s in result["series"].items():
        verdicts.add_row(
            key, s["engine"] or "?", (s["capacity"] or {}).get("text", "-"),
            fmt((s["cliff"] or {}).get("load"), ".3g"), fmt((s["predicted_cliff"] or {}).get("load"), ".3g"),
            fmt(s["peak_output_tokens_per_s"], ",.0f"), fmt(s["peak_tasks_per_hour"], ",.0f"),
        )  # fmt: skip
    console.print(verdicts)
    keys = list(result["series"])
    by_load = Table(title=f"by {result['knob']}: output tok/s | TTFT p99 ms | hit/ideal")
    by_load.add_column("load", justify="right")
    for key in keys:
        by_load.add_column(key, justify="right")
    for row in result["by_load"]:
        cells = []
        for key in keys:
            v = row["series"].get(key)
            cells.append(
                "-"
                if v is None
                else f"{fmt(v['output_tokens_per_s'], ',.0f')} | {fmt(v['ttft_ms.p99'], ',.0f')} | "
                f"{fmt(v['hit_vs_ideal'], '.2f')}" + ("" if v["valid"] else " (invalid)")
            )
        by_load.add_row(fmt(row["load"], "g"), *cells)
    console.print(by_load)
    errors = result.get("errors") or {}
    for key, e in (errors.get("series") or {}).items():
        console.print(_error_table(errors["reference"], key, e, errors["bound"]))
    for label, ratio in result["capacity_ratios"].items():
        console.print(f"capacity ratio {label}: {ratio:.2f}x", highlight=False)
    for c in result["crossovers"]:
        console.print(
            f"crossover on {c['figure']} at ~{c['load']:.3g}: {c['leader_after']} overtakes {c['leader_before']}",
            highlight=False,
        )
    if (recorded := result.get("recorded")) is not None:
        console.print(
            f"recorded the twin's error in {recorded['calibration']}: every simulation of this twin states it",
            highlight=False,
        )


def _error_table(reference: str, key: str, errors: dict[str, Any], bound: float) -> Table:
    """One series' relative errors against the reference's, per load (``sweep.compare``)."""
    from swarm.sweep.compare import ERROR_FIGURES

    names = {"ttft_ms.p50": "TTFT p50", "ttft_ms.p99": "TTFT p99", "output_tokens_per_s": "out tok/s",
             "e2e_ms.p50": "E2E p50", "tasks.completion_ms.p50": "task p50", "hit_ratio": "hit"}  # fmt: skip
    steps = errors["cliff_steps"]
    cliff = "no cliff in either" if steps is None and errors["cliffs"] == [None, None] else (
        f"cliff {fmt(errors['cliffs'][1], '.3g')} vs {fmt(errors['cliffs'][0], '.3g')}"
        + (f" ({steps:+.2f} ladder steps)" if steps is not None else "")
    )  # fmt: skip
    verdict = "within" if errors["within"] else "NOT within"
    table = Table(
        title=f"{key} against {reference}: (series - reference) / reference; {cliff}; "
        f"worst {errors['worst']:.1%}, {verdict} ±{bound:.0%} (hit: or 0.05) and one ladder step"
    )
    table.add_column("load", justify="right")
    for f in ERROR_FIGURES:
        table.add_column(names.get(f, f), justify="right")
    for row in errors["by_load"]:
        cells = [fmt(row[f], "+.1%") for f in ERROR_FIGURES]
        diff = row.get("hit_ratio.diff")
        cells[-1] += f" ({diff:+.2f})" if diff is not None else ""
        table.add_row(fmt(row["load"], "g"), *cells)
    return table


def record_twin_error(result: dict[str, Any], folders: list[str], path: str) -> dict[str, Any]:
    """Write the twin's error (the second sweep's, against the first's) into its calibration
    file; refuses a file of another engine than the twin's sweep, or two sweeps not of one
    ladder (no load measured on both)."""
    import datetime

    from swarm.engines.calibration import HeldAgainst, load_calibration, record_held_against
    from swarm.sweep.compare import twin_error

    calibration = load_calibration(path)
    series = result["errors"].get("series", {})
    if len(series) != 1 or len(result["series"]) != 2:
        raise InputError(
            f"--record-error holds one twin against one engine: sweeps of one target each ({len(result['series'])} "
            "series given)"
        )
    twin = next(iter(series))
    engine = (result["series"].get(twin) or {}).get("engine")
    if engine is not None and engine != calibration.engine:
        raise InputError(f"{path}: engine: {calibration.engine}; the twin's sweep ({folders[1]}) is of {engine}")
    errors, cliff_steps = twin_error(result["errors"], twin)
    if not errors:
        raise InputError("--record-error: no load was measured on both sweeps (the same --ladder is needed)")
    held = HeldAgainst(
        engine_sweep=folders[0], twin_sweep=folders[1],
        recorded_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        errors=errors, cliff_steps=cliff_steps,
    )  # fmt: skip
    record_held_against(path, held)
    return {"calibration": path, **held.model_dump(mode="json")}
