"""``swarm report`` and ``swarm compare``: a run's figures on the terminal, as HTML or JSON, and
targets side by side.

Place in the map (docs/architecture.md, "CLI"): renders ``analysis``'s typed figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from swarm.analysis.rows import fmt, report_rows
from swarm.cli.app import app
from swarm.cli.flags import Given, takes
from swarm.cli.sending import report_console, save_report, write_or_print
from swarm.errors import InputError

if TYPE_CHECKING:
    from swarm.analysis.figures import RunReport
    from swarm.analysis.fleet import FleetFigures


@app.command()
@takes("report")
def report(
    run_dir: Annotated[str, typer.Argument(help="a run folder, or a sweep folder (swarm sweep)")],
    *,
    given: Given,
) -> None:
    """Every figure of a run, per target, from its trace (terminal tables, --html, --json); for a
    sweep folder, its points, fronts, capacity at SLO and eviction cliff."""
    from swarm.sweep.manifest import is_sweep_folder

    html, as_json, slos, output = given.get("html"), bool(given.get("json_out")), given.get("slo", []), given.get("output")
    if is_sweep_folder(run_dir):
        from swarm.cli.sweep_view import print_sweep_report

        print_sweep_report(run_dir, html, as_json, slos or None, output)
        return
    report_command(run_dir, html, as_json, slos, output)


@app.command()
@takes("compare")
def compare(
    run_dirs: Annotated[
        list[str], typer.Argument(help="run folders (or one run with several targets), or sweep folders")
    ],
    force: Annotated[bool, typer.Option(help="compare runs whose workloads differ (seed, spec)")] = False,
    tie_within: Annotated[
        float, typer.Option(min=0, help="a lead smaller than this share is a tie (0.02: 2 %)")
    ] = 0.02,
    across_clocks: Annotated[
        bool, typer.Option(help="name leaders between simulated (swarm simulate) and measured runs")
    ] = False,
    record_error: Annotated[
        str | None,
        typer.Option(
            metavar="CALIBRATION",
            help="two sweeps, the engine's then its twin's: write the twin's error per figure into the "
            "twin's calibration file (swarm calibrate), which every simulation of it then states",
        ),
    ] = None,
    *,
    given: Given,
) -> None:
    """Targets side by side: one row per dimension, a column per target, who leads and by how much;
    sweeps side by side: capacity, cliffs, crossovers and figures per load."""
    from swarm.sweep.manifest import is_sweep_folder

    as_json, output = bool(given.get("json_out")), given.get("output")
    sweeps = [is_sweep_folder(d) for d in run_dirs]
    if any(sweeps):
        if not all(sweeps):
            raise InputError("compare sweep folders with sweep folders, run folders with run folders")
        from swarm.cli.sweep_view import print_sweep_comparison

        print_sweep_comparison(run_dirs, as_json, output, record_error=record_error)
        return
    if record_error is not None:
        raise InputError("--record-error takes two sweep folders: the engine's, then its twin's")
    compare_command(run_dirs, as_json, given.get("slo", []), force, tie_within, output, across_clocks)


def report_tables(report: RunReport) -> list[Table]:
    """The report's table (``rows.REPORT_ROWS``) and a by-depth table per target that has one."""
    targets = report.targets
    names = list(targets)
    simulated = report.run.get("simulated") is not None
    overview = Table(title=f"report {report.run['run_id']} ({'simulated, ' if simulated else ''}from the trace)")
    overview.add_column("figure")
    for n in names:
        label = " (simulated)" if simulated else " (emulated)" if targets[n].emulated else ""
        overview.add_column(n + label, justify="right")
    for row in report_rows(report.slo is not None):
        overview.add_row(row.title(), *[row.cell(targets[n]) for n in names])
    tables = [overview]
    if any(targets[n].intervals for n in names):
        tables.append(interval_table(report))
    tables += [fleet_table(n, fleet) for n in names if (fleet := targets[n].fleet) is not None]
    for n in names:
        depth = targets[n].breakdowns.get("depth")
        if not depth:
            continue
        t = Table(title=f"{n} by depth")
        for col in ("depth", "requests", "TTFT p50", "TTFT p99", "cache hit", "ideal"):
            t.add_column(col, justify="right")
        for r in depth:
            t.add_row(
                str(r.value), str(r.requests), fmt(r.ttft_ms.p50), fmt(r.ttft_ms.p99),
                fmt(r.cache.hit_ratio, ".1%"), fmt(r.cache.ideal_hit_ratio, ".1%"),
            )  # fmt: skip
        tables.append(t)
    return tables


def fleet_table(name: str, fleet: FleetFigures) -> Table:
    """A fleet's replicas: their load, their hits, and their missed prompt tokens split by cause
    (``analysis.fleet``), with the fleet's imbalance and routed-away share in the title and a
    line under it for each replica lost mid-run."""
    from swarm.analysis.fleet import HIT_RECOVERED

    routed = fleet.share("routed_away")
    lost = [
        f"{loss.replica} lost at {loss.gone_at_s:.1f} s: {loss.failed} requests failed and {loss.retried} were "
        f"retried after it, the last failure ending {loss.errors_recovered_after_s:.1f} s later; hit back to "
        + (f"{HIT_RECOVERED:.0%} of before {loss.hit_recovered_after_s:.1f} s later" if loss.hit_recovered_after_s
           is not None else f"{HIT_RECOVERED:.0%} of before: not within the run")
        + (f"; {loss.sessions_lost_prefix} sessions lost their cached prefix" if loss.sessions_lost_prefix is not None
           else "; which sessions lost their prefix is not known (no response named its replica)")
        for loss in fleet.losses
    ]  # fmt: skip
    table = Table(
        title=f"{name}: {len(fleet.replicas)} replicas, imbalance {fmt(fleet.imbalance, '.2f')}x, "
        f"misses routed away {fmt(routed, '.1%')}"
        + (f" ({fleet.unattributed} requests named no replica)" if fleet.unattributed else ""),
        caption="\n".join(lost) or None,
    )
    for col in ("replica", "requests", "share", "failed", "hit", "hit / ideal", "server hit", "missed tokens",
                "compulsory", "evicted", "routed away"):  # fmt: skip
        table.add_column(col, justify="left" if col == "replica" else "right")
    for r in fleet.replicas:
        missed = r.compulsory + r.evicted + r.routed_away
        table.add_row(
            r.replica, str(r.requests), fmt(r.load_share, ".1%"), str(r.failed), fmt(r.hit, ".1%"),
            fmt(r.hit_vs_ideal, ".1%"), fmt(r.server_hit, ".1%"), f"{missed:,}",
            *(fmt(part / missed if missed else None, ".1%") for part in (r.compulsory, r.evicted, r.routed_away)),
        )  # fmt: skip
    return table


def interval_table(report: RunReport) -> Table:
    """Each figure that has one (``analysis.intervals``) with its 95 % interval, per target."""
    from swarm.analysis.intervals import FIGURES

    targets = report.targets
    names = list(targets)
    kinds = sorted({f"{i.units} ({i.n})" for n in names for i in targets[n].intervals.values()})
    table = Table(title=f"95 % intervals (bootstrap over {', '.join(kinds)})")
    table.add_column("figure")
    for n in names:
        table.add_column(n, justify="right")
    figures = [name for name in FIGURES if any(name in targets[n].intervals for n in names)]
    for name in figures:
        cells = []
        for n in names:
            i = targets[n].intervals.get(name)
            spec = ".1%" if name in ("cache hit ratio", "error rate") else ",.1f"
            cells.append(f"{fmt(i.low, spec)} - {fmt(i.high, spec)}" if i else "-")
        table.add_row(name, *cells)
    return table


def report_command(
    run_dir: str, html_path: Path | None, as_json: bool, slos: list[str], output: str | None = None
) -> None:
    from swarm.analysis.metrics import parse_slos
    from swarm.analysis.report import build_run_report, load_run, without_timelines

    try:
        slo = parse_slos(slos) if slos else None
        run = load_run(run_dir)
    except (ValueError, FileNotFoundError) as exc:
        raise InputError(str(exc)) from None
    report = build_run_report(run, slo)
    if html_path is not None:
        from swarm.analysis.html import render_html

        html_path.write_text(render_html(run, report), encoding="utf-8")
        print(f"wrote {html_path}", file=sys.stderr)
    if as_json:
        write_or_print(json.dumps(without_timelines(report.as_dict()), indent=2, default=str), output)
        return
    console = report_console(output)
    for warning in report.warnings:
        console.print(f"[bold yellow]warning:[/] {warning}", soft_wrap=True, highlight=False)
    for table in report_tables(report):
        console.print(table)
    save_report(console, output)


def compare_table(comparison: dict[str, Any]) -> Table:
    table = Table(title="compare (from the traces)")
    table.add_column("dimension")
    for c in comparison["columns"]:
        kind = " (simulated)" if comparison.get("simulated", {}).get(c) else " (emulated)" if comparison["emulated"].get(c) else ""
        table.add_column(c + kind, justify="right")
    table.add_column("leader (ratio)", justify="left")
    for row in comparison["rows"]:
        spec = {"": ".1%", "tok": ",.0f"}.get(row["unit"], ".1f")
        if row["dimension"] == "requests":
            spec = ",.0f"
        unit = f" ({row['unit']})" if row["unit"] else ""
        better = {"lower": " ↓", "higher": " ↑"}.get(row["better"], "")
        lead = "-"
        interval = row.get("interval")
        within = f", 95 % {interval['low']:.2f}-{interval['high']:.2f}" if interval else ""
        if row["leader"] is not None:
            lead = f"{row['leader']} ({fmt(row['ratio'], '.2f')}x{within})"
        elif row.get("withheld"):
            lead = f"withheld ({fmt(row['ratio'], '.2f')}x{within})"
        elif row.get("tie"):
            lead = f"tie ({fmt(row['ratio'], '.2f')}x{within})"
        table.add_row(row["dimension"] + unit + better, *[fmt(v, spec) for v in row["values"]], lead)
    return table


def interval_note(comparison: dict[str, Any]) -> str | None:
    """What the ratios' intervals rest on (repeats or sessions, how many, paired or not)."""
    kinds = sorted({f"{r['interval']['units']} ({r['interval']['n']})" for r in comparison["rows"] if r.get("interval")})
    if not kinds:
        return None
    return (
        f"95 % intervals of the leader's ratio: bootstrap over {', '.join(kinds)}; a lead whose interval "
        "reaches 1.00x is a tie. Over sessions they say how much a figure owes to the sessions drawn, "
        "not the run-to-run noise of the machine and engine: run with --repeat N for that"
    )


def reuse_table(comparison: dict[str, Any]) -> Table:
    """Prefix reuse against the ideal, per target: where the cache design lost it
    (``analysis.reuse_loss``)."""
    table = Table(
        title="prefix reuse vs the ideal (tokens; shares of the ideal: realised + lost - past = 100 %)"
    )
    table.add_column("")
    columns = list(comparison["reuse"])
    for c in columns:
        table.add_column(c, justify="right")
    reuse = comparison["reuse"]

    def cell(c: str, key: str) -> str:
        value, ideal = reuse[c][key], reuse[c]["ideal_tokens"]
        share = f" ({value / ideal:.0%})" if ideal and key != "ideal_tokens" else ""
        return f"{value:,}{share}"

    table.add_row("cache block (tokens)", *[str(reuse[c]["block_tokens"]) for c in columns])
    table.add_row("ideal cached", *[cell(c, "ideal_tokens") for c in columns])
    table.add_row("realised cached", *[cell(c, "cached_tokens") for c in columns])
    table.add_row("lost to the block size", *[cell(c, "granularity_lost") for c in columns])
    table.add_row("lost otherwise", *[cell(c, "other_lost") for c in columns])
    table.add_row("cached past the reachable", *[cell(c, "beyond") for c in columns])
    table.add_row(
        "requests at their reachable reuse", *[fmt(reuse[c]["at_reachable"], ".0%") for c in columns]
    )
    return table


def reuse_sentences(comparison: dict[str, Any]) -> list[str]:
    """One line per target naming what lost its reuse."""
    out = []
    for c, r in comparison["reuse"].items():
        if not r["ideal_tokens"]:
            continue
        block = (
            f"{r['granularity_lost'] / r['ideal_tokens']:.0%} to {r['block_tokens']}-token blocks"
            if r["block_tokens"] > 1
            else f"{r['granularity_lost'] / r['ideal_tokens']:.0%} to the last prompt token (token-level reuse)"
        )
        out.append(
            f"{c}: of {r['ideal_tokens']:,} reusable tokens it cached {r['cached_tokens'] / r['ideal_tokens']:.0%}; "
            f"lost {block} and {r['other_lost'] / r['ideal_tokens']:.0%} otherwise ({r['other_cause']})"
        )
    return out


def routing_sentences(comparison: dict[str, Any]) -> list[str]:
    """Per fleet its routed-away misses; for two fleets, the share of their hit difference that
    routing explains (``analysis.compare.routing_share``)."""
    from swarm.analysis.compare import routing_share

    fleets = comparison.get("routing") or {}
    out = [
        f"{c}: {f['replicas']} replicas, imbalance {fmt(f['imbalance'], '.2f')}x, cache hit {fmt(f['hit'], '.1%')}, "
        f"misses routed away {fmt(f['routed_away_of_prompt'], '.1%')} of prompt tokens "
        f"({fmt(f['routed_away_of_misses'], '.0%')} of its misses)"
        for c, f in fleets.items()
    ]
    if len(fleets) == 2:
        (a, fa), (b, fb) = sorted(fleets.items(), key=lambda kv: -(kv[1]["hit"] or 0.0))
        share = routing_share(fa, fb)
        if share is not None:
            out.append(
                f"routing: {a}'s cache hit is {100 * ((fa['hit'] or 0) - (fb['hit'] or 0)):.1f} points above {b}'s; "
                f"misses routed away explain {share:.0%} of that"
            )
    return out


def compare_command(
    run_dirs: list[str], as_json: bool, slos: list[str], force: bool, tie_within: float = 0.02,
    output: str | None = None, across_clocks: bool = False,
) -> None:  # fmt: skip
    from swarm.analysis.compare import compare
    from swarm.analysis.metrics import parse_slos
    from swarm.analysis.report import load_run

    try:
        slo = parse_slos(slos) if slos else None
        runs = [load_run(d) for d in run_dirs]
    except (ValueError, FileNotFoundError) as exc:
        raise InputError(str(exc)) from None
    result = compare(runs, slo, force=force, tie_within=tie_within, across_clocks=across_clocks).as_dict()
    if as_json:
        write_or_print(json.dumps(result, indent=2, default=str), output)
        return
    console = report_console(output)
    for warning in result["warnings"]:
        console.print(f"[bold red]warning:[/] {warning}", soft_wrap=True, highlight=False)
    console.print(compare_table(result))
    if result.get("reuse"):
        console.print(reuse_table(result))
        for line in reuse_sentences(result):
            console.print(line, soft_wrap=True, highlight=False)
    for line in routing_sentences(result):
        console.print(line, soft_wrap=True, highlight=False)
    console.print(
        f"[dim]a lead under {tie_within:.0%} is a tie (--tie-within); ratios: runner-up / leader for "
        "figures where lower is better, leader / runner-up where higher is better[/dim]"
    )
    if (note := interval_note(result)) is not None:
        console.print(f"[dim]{note}[/dim]", soft_wrap=True, highlight=False)
    save_report(console, output)
