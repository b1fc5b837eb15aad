"""``swarm fit`` and ``swarm realism``: a trace's shape as a profile, and a swarm's shape against a trace.

Place in the map (docs/architecture.md, "CLI"): both read a source into a ``ShapeTable``
(``load_table``: a run folder, a run spec ``.yaml`` read offline and checked as ``swarm run``
checks it, or a trace in any format ``swarm replay`` reads, through ``TraceSourceSpec``) and
call ``swarm.shape``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from swarm.cli.app import app
from swarm.cli.flags import Given, takes, validated
from swarm.errors import InputError

if TYPE_CHECKING:
    from swarm.replay.source_spec import TraceSourceSpec
    from swarm.shape.table import ShapeTable

#: how many of a spec's agents ``swarm realism`` reads when --agents does not say
SPEC_AGENTS = 200

def load_table(
    source: str, reading: TraceSourceSpec | None = None, *, target: str | None = None, agents: int | None = None
) -> ShapeTable:
    """The ShapeTable of ``source``: a run spec (``.yaml``, offline, at most ``agents``
    agents), an agent profile's name (the spec ``swarm run --profile NAME`` runs, offline), a
    run folder (its ``target``, else the reading's source target), or a trace file or folder
    read as ``reading`` says."""
    from swarm.replay.formats import detect_format
    from swarm.replay.source_spec import TraceSourceSpec
    from swarm.shape.table import table_from_plan, table_from_run, table_from_spec

    if source.endswith((".yaml", ".yml")):
        from swarm.runtime.specs import RunSpec
        from swarm.workload.specfiles import load_run_spec_file

        spec = validated(RunSpec, load_run_spec_file(source), source)
        return table_from_spec(spec.workload, source, agents)
    profile = _builtin_profile(source)
    if profile is not None:
        from swarm.workload.workload import MixEntry, WorkloadSpec

        # a profile by name: the run spec `swarm run --profile NAME` sends (its own topologies)
        return table_from_spec(WorkloadSpec(mix=[MixEntry(profile=profile)]), f"profile {profile}", agents)
    reading = (reading or TraceSourceSpec()).model_copy(update={"source": source})
    if (reading.format or detect_format(source)) == "swarm":
        return table_from_run(source, target or reading.source_target)
    return table_from_plan(reading.load())


def _builtin_profile(source: str) -> str | None:
    """``source`` when it names an agent profile (and no file or folder of that name exists)."""
    if Path(source).exists() or "/" in source:
        return None
    from swarm.workload.catalog import default_catalog

    return source if source in default_catalog().profile_names() else None


def _reading(given: Given) -> TraceSourceSpec:
    from swarm.replay.source_spec import TraceSourceSpec

    return validated(TraceSourceSpec, given.apply({}, skip=("workload",)), "flags", given)


@app.command()
@takes("fit")
def fit(
    trace: Annotated[str, typer.Argument(help="a trace (any format swarm replay reads) or a run folder")],
    name: Annotated[str | None, typer.Option(help="the profile's name (default: the spec file's name)")] = None,
    *,
    given: Given,
) -> None:
    """Derive an agent profile, its topologies and a run spec in the shape of a trace."""
    from swarm.shape.fit import fit_table, write_fit

    output = given.get("output")
    if output is None or not output.endswith((".yaml", ".yml")):
        raise InputError("swarm fit: give the run spec to write, -o SPEC.yaml (the profile and topologies go beside it)")
    out = Path(output)
    result = fit_table(load_table(trace, _reading(given)), name or out.name.removesuffix(".yaml").removesuffix(".yml"))
    written = [str(p) for p in write_fit(result, out)]
    if given.get("json_out"):
        print(json.dumps({"written": written, "sessions": result.sessions, "requests": result.requests,
                          "topologies": len(result.topologies), "notes": result.notes}, indent=2))  # fmt: skip
        return
    for path in written:
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
@takes("realism")
def realism(
    candidate: Annotated[
        str, typer.Argument(help="a run folder, a run spec .yaml, or an agent profile's name (read offline)")
    ],
    against: Annotated[str, typer.Option("--against", help="the reference: a trace or a run folder")],
    candidate_target: Annotated[
        str | None, typer.Option(help="the candidate run's target (default: the first)")
    ] = None,
    read_agents: Annotated[
        int, typer.Option(min=1, help="a candidate spec: how many of its agents to read")
    ] = SPEC_AGENTS,
    figure_set: Annotated[
        str | None,
        typer.Option("--set", help="--against a figures file: which of its sets (a study's workloads)"),
    ] = None,
    *,
    given: Given,
) -> None:
    """Compare the distributions that decide prefix-cache behaviour: a swarm against a trace,
    or against a study's published figures (a figures file, or a built-in's name:
    trtllm_agentic, claude_code)."""
    from swarm.cli.sending import write_or_print
    from swarm.shape.features import comparable_features
    from swarm.shape.figures import is_figures_file
    from swarm.shape.realism import compare, text_table

    cand = load_table(candidate, target=candidate_target, agents=read_agents)
    if is_figures_file(against):
        _against_figures(cand, against, figure_set, given)
        return
    if figure_set is not None:
        raise InputError(f"--set: {against} is not a figures file (a YAML with sets:)")
    ref = load_table(against, _reading(given))
    cv, rv, _ = comparable_features(cand, ref)
    report = compare(cand, ref, cv, rv)
    html = given.get("html")
    if html is not None:
        from swarm.shape.realism_html import render_realism_html

        html.write_text(render_realism_html(report, cv, rv), encoding="utf-8")
    if given.get("json_out"):
        write_or_print(json.dumps(report.to_json(), indent=2), given.get("output"))
        return
    far = f": far on {', '.join(report.far)}" if report.far else ""
    lines = [
        f"candidate: {report.candidate} ({len(cand.rows)} requests)",
        f"reference: {report.reference} ({len(ref.rows)} requests)",
        "values: candidate / reference",
        text_table(report),
        f"verdict: {report.verdict}{far}",
        *(f"note: {note}" for note in report.notes),
        *([f"wrote {html}"] if html is not None else []),
    ]
    write_or_print("\n".join(lines), given.get("output"))


def _against_figures(cand: ShapeTable, against: str, figure_set: str | None, given: Given) -> None:
    """``swarm realism`` against a figures file: one verdict per published figure."""
    from swarm.cli.sending import write_or_print
    from swarm.shape.features import features
    from swarm.shape.figures import figures_table, hold, load_figures, pick_set

    if given.get("html") is not None:
        raise InputError("--html: a figures file has no distributions to draw; leave --html out")
    figures, path = load_figures(against)
    name, fset = pick_set(figures, path, figure_set)
    report = hold(features(cand), figures, name, fset, cand.source)
    report.notes += [f"candidate: {n}" for n in cand.notes]
    if given.get("json_out"):
        write_or_print(json.dumps(report.to_json(), indent=2), given.get("output"))
        return
    far = f": far on {', '.join(report.far)}" if report.far else ""
    lines = [
        f"candidate: {report.candidate} ({len(cand.rows)} requests)",
        f"reference: {path}, set {name}: {figures.source}",
        "error: |candidate - published| / published; match within the tolerance, near within twice it",
        figures_table(report),
        f"verdict: {report.verdict}{far}",
        *(f"note: {note}" for note in report.notes),
    ]
    write_or_print("\n".join(lines), given.get("output"))
