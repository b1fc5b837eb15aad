"""``swarm fit`` and ``swarm realism``: a trace's shape as a profile, and a swarm's shape against a trace.

Place in the map (docs/architecture.md, "CLI"): both read a source into a ``ShapeTable``
(``load_table``: a run folder, a run spec ``.yaml`` read offline, or a trace in any format
``swarm replay`` reads) and call ``swarm.shape``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from swarm.cli.app import app
from swarm.errors import InputError

if TYPE_CHECKING:
    from swarm.shape.table import ShapeTable

Format = Annotated[
    str | None,
    typer.Option("--format", help="the trace's format, as for swarm replay (default: from the file)"),
]
Limit = Annotated[int | None, typer.Option(help="trace files: read the first N requests kept")]
Sample = Annotated[
    float | None,
    typer.Option(help="trace files: keep this fraction (whole conversations where the format has them)"),
]
SkipBad = Annotated[
    bool, typer.Option("--skip-bad-lines", help="skip malformed lines (counted) instead of stopping")
]
SourceTarget = Annotated[
    str | None, typer.Option(help="run folders: which target's requests (default: the first)")
]


def load_table(
    source: str,
    *,
    fmt: str | None = None,
    limit: int | None = None,
    sample: float | None = None,
    skip_bad_lines: bool = False,
    target: str | None = None,
    agents: int | None = None,
) -> ShapeTable:
    """The ShapeTable of ``source``: a run spec (``.yaml``, offline, at most ``agents``
    agents), a run folder, or a trace file or folder."""
    from swarm.shape.table import table_from_plan, table_from_run, table_from_spec

    if source.endswith((".yaml", ".yml")):
        from swarm.workload.specfiles import load_run_spec_file

        return table_from_spec(load_run_spec_file(source), source, agents)
    from swarm.cli.replay import build_plan
    from swarm.replay.formats import detect_format

    fmt = fmt or detect_format(source)
    if fmt == "swarm":
        return table_from_run(source, target)
    plan, _ = build_plan(source, fmt, limit=limit, sample=sample, skip_bad_lines=skip_bad_lines)
    return table_from_plan(plan)


@app.command()
def fit(
    trace: Annotated[str, typer.Argument(help="a trace (any format swarm replay reads) or a run folder")],
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="the run spec to write; the profile and topologies go beside it"),
    ],
    name: Annotated[
        str | None, typer.Option(help="the profile's name (default: the spec file's name)")
    ] = None,
    format: Format = None,
    limit: Limit = None,
    sample: Sample = None,
    skip_bad_lines: SkipBad = False,
    source_target: SourceTarget = None,
) -> None:
    """Derive an agent profile, its topologies and a run spec in the shape of a trace."""
    from swarm.shape.fit import fit_table, write_fit

    if not output.name.endswith((".yaml", ".yml")):
        raise InputError(f"-o {output}: the run spec is a .yaml file")
    table = load_table(
        trace, fmt=format, limit=limit, sample=sample, skip_bad_lines=skip_bad_lines, target=source_target
    )
    profile_name = name or output.name.removesuffix(".yaml").removesuffix(".yml")
    result = fit_table(table, profile_name)
    for path in write_fit(result, output):
        print(f"wrote {path}")
    print(
        f"{result.sessions} sessions, {result.requests} requests; system prompt {result.system_prompt_tokens} "
        f"tokens ({result.system_prompts} distinct); {len(result.topologies)} topologies"
    )
    for note in result.notes:
        print(f"note: {note}")
    print(
        f"next: swarm run --spec {output} --agents N (--arrival to change the recorded pace); "
        f"swarm realism {output} --against {trace}"
    )


@app.command()
def realism(
    candidate: Annotated[str, typer.Argument(help="a run folder, or a run spec .yaml (read offline)")],
    against: Annotated[str, typer.Option("--against", help="the reference: a trace or a run folder")],
    agents: Annotated[int, typer.Option(help="a spec: how many of its agents to read (default 200)")] = 200,
    format: Format = None,
    limit: Limit = None,
    sample: Sample = None,
    skip_bad_lines: SkipBad = False,
    target: Annotated[
        str | None, typer.Option(help="the candidate run's target (default: the first)")
    ] = None,
    source_target: SourceTarget = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    html: Annotated[Path | None, typer.Option(help="also write the comparison as an HTML page")] = None,
) -> None:
    """Compare the distributions that decide prefix-cache behaviour: a swarm against a trace."""
    from swarm.shape.features import features
    from swarm.shape.realism import compare, text_table

    cand = load_table(candidate, target=target, agents=agents)
    ref = load_table(
        against, fmt=format, limit=limit, sample=sample, skip_bad_lines=skip_bad_lines, target=source_target
    )
    cv, rv = features(cand), features(ref)
    report = compare(cand, ref, cv, rv)
    if html is not None:
        from swarm.shape.realism_html import render_realism_html

        html.write_text(render_realism_html(report, cv, rv), encoding="utf-8")
    if json_out:
        print(json.dumps(report.to_json(), indent=2))
        return
    print(f"candidate: {report.candidate} ({len(cand.rows)} requests)")
    print(f"reference: {report.reference} ({len(ref.rows)} requests)")
    print("values: candidate / reference")
    print(text_table(report))
    far = f": far on {', '.join(report.far)}" if report.far else ""
    print(f"verdict: {report.verdict}{far}")
    for note in report.notes:
        print(f"note: {note}")
    if html is not None:
        print(f"wrote {html}")
