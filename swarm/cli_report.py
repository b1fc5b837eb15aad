"""``swarm report`` and ``swarm compare`` in the terminal: rich tables of the analysis dicts.

Place in the map (docs/architecture.md): part of the CLI. The figures come from ``analysis.report`` and
``analysis.compare``; this module only lays them out.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from swarm.errors import InputError


def _f(value: Any, spec: str = ".1f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        return format(value, spec)
    return str(value)


def report_tables(report: dict[str, Any]) -> list[Table]:
    targets = report["targets"]
    names = list(targets)
    overview = Table(title=f"report {report['run']['run_id']} (from the trace; latencies in ms)")
    overview.add_column("figure")
    for n in names:
        overview.add_column(n + (" (emulated)" if targets[n]["emulated"] else ""), justify="right")

    def row(label: str, getter: Any, spec: str = ".1f") -> None:
        values = []
        for n in names:
            try:
                values.append(_f(getter(targets[n]), spec))
            except (KeyError, TypeError):
                values.append("-")
        overview.add_row(label, *values)

    fig = lambda t: t["figures"]  # noqa: E731
    row("requests (ok)", lambda t: f"{fig(t)['requests']} ({fig(t)['ok']})")
    row(
        "errors",
        lambda t: ", ".join(f"{k} {v}" for k, v in fig(t)["errors"]["by_status"].items() if k != "ok") or "0",
    )
    for name, key in (("TTFT", "ttft_ms"), ("ITL", "itl_ms"), ("TPOT", "tpot_ms"), ("E2E", "e2e_ms")):
        row(
            f"{name} p50 / p99 / max",
            lambda t, key=key: " / ".join(_f(fig(t)[key][q]) for q in ("p50", "p99", "max")),
        )
    row(
        "TTFT first / branch calls p50",
        lambda t: f"{_f(fig(t)['first_call_ttft_ms']['p50'])} / {_f(fig(t)['branch_call_ttft_ms']['p50'])}",
    )
    row(
        "dispatch lag p99 / slot wait p99",
        lambda t: f"{_f(fig(t)['lag_ms']['p99'], '.2f')} / {_f(fig(t)['slot_wait_ms']['p99'], '.2f')}",
    )
    row(
        "output tok/s (peak 1 s)",
        lambda t: (
            f"{_f(fig(t)['throughput']['output_tokens_per_s'])} ({_f(fig(t)['throughput']['peak_output_tokens_per_s'])})"
        ),
    )
    row(
        "cache hit: client / ideal",
        lambda t: (
            f"{_f(fig(t)['cache']['hit_ratio'], '.1%')} / {_f(fig(t)['cache']['ideal_hit_ratio'], '.1%')}"
        ),
    )
    row("prefill tokens saved", lambda t: fig(t)["cache"]["prefill_tokens_saved"])
    row("cache hit: server", lambda t: (t["server"] or {}).get("cache_hit_ratio"), ".1%")
    row(
        "server queue mean / max",
        lambda t: f"{_f(t['server']['queue']['mean'], '.2f')} / {_f(t['server']['queue']['max'], '.0f')}",
    )
    row(
        "agent task completion p50 / p95",
        lambda t: (
            f"{_f(fig(t)['sessions']['completion_ms']['p50'])} / {_f(fig(t)['sessions']['completion_ms']['p95'])}"
        ),
    )
    row("calls per session", lambda t: fig(t)["sessions"]["calls"]["mean"])
    if report.get("slo"):
        row(f"goodput ({report['slo']}) req/s", lambda t: fig(t)["goodput"]["request_goodput_per_s"], ".2f")
        row("goodput share", lambda t: fig(t)["goodput"]["good_fraction"], ".1%")
    tables = [overview]
    for n in names:
        depth = targets[n]["breakdowns"].get("depth")
        if not depth:
            continue
        t = Table(title=f"{n} by depth")
        for col in ("depth", "requests", "TTFT p50", "TTFT p99", "cache hit", "ideal"):
            t.add_column(col, justify="right")
        for r in depth:
            t.add_row(
                str(r["depth"]), str(r["requests"]), _f(r["ttft_ms"]["p50"]), _f(r["ttft_ms"]["p99"]),
                _f(r["cache"]["hit_ratio"], ".1%"), _f(r["cache"]["ideal_hit_ratio"], ".1%"),
            )  # fmt: skip
        tables.append(t)
    return tables


def report_command(run_dir: str, html_path: Path | None, as_json: bool, slos: list[str]) -> None:
    from swarm.analysis.metrics import parse_slos
    from swarm.analysis.report import build_report, load_run, without_timelines

    try:
        slo = parse_slos(slos) if slos else None
        run = load_run(run_dir)
    except (ValueError, FileNotFoundError) as exc:
        raise InputError(str(exc)) from None
    report = build_report(run, slo)
    if html_path is not None:
        from swarm.analysis.html import render_html

        html_path.write_text(render_html(run, report), encoding="utf-8")
        print(f"wrote {html_path}", file=sys.stderr)
    if as_json:
        print(json.dumps(without_timelines(report), indent=2, default=str))
        return
    console = Console()
    for warning in report.get("warnings", []):
        console.print(f"[bold yellow]warning:[/] {warning}", soft_wrap=True, highlight=False)
    for table in report_tables(report):
        console.print(table)


def compare_table(comparison: dict[str, Any]) -> Table:
    table = Table(title="compare (from the traces)")
    table.add_column("dimension")
    for c in comparison["columns"]:
        table.add_column(c + (" (emulated)" if comparison["emulated"].get(c) else ""), justify="right")
    table.add_column("leader (ratio)", justify="left")
    for row in comparison["rows"]:
        spec = {"": ".1%", "tok": ",.0f"}.get(row["unit"], ".1f")
        if row["dimension"] == "requests":
            spec = ",.0f"
        unit = f" ({row['unit']})" if row["unit"] else ""
        better = {"lower": " ↓", "higher": " ↑"}.get(row["better"], "")
        lead = "-"
        if row["leader"] is not None:
            lead = f"{row['leader']} ({_f(row['ratio'], '.2f')}x)"
        elif row.get("tie"):
            lead = f"tie ({_f(row['ratio'], '.2f')}x)"
        table.add_row(row["dimension"] + unit + better, *[_f(v, spec) for v in row["values"]], lead)
    return table


def compare_command(
    run_dirs: list[str], as_json: bool, slos: list[str], force: bool, tie_within: float = 0.02
) -> None:
    from swarm.analysis.compare import compare
    from swarm.analysis.metrics import parse_slos
    from swarm.analysis.report import load_run

    try:
        slo = parse_slos(slos) if slos else None
        runs = [load_run(d) for d in run_dirs]
    except (ValueError, FileNotFoundError) as exc:
        raise InputError(str(exc)) from None
    result = compare(runs, slo, force=force, tie_within=tie_within).as_dict()
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    console = Console()
    for warning in result["warnings"]:
        console.print(f"[bold red]warning:[/] {warning}", soft_wrap=True, highlight=False)
    console.print(compare_table(result))
    console.print(
        f"[dim]a lead under {tie_within:.0%} is a tie (--tie-within); ratios: runner-up / leader for "
        "figures where lower is better, leader / runner-up where higher is better[/dim]"
    )
