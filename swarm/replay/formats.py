"""The trace-format registry: every format swarm reads, detection, and the one way to read a source.

Place in the map (docs/architecture.md, "Replay"): ``FORMATS`` lists each format module's
``FORMAT`` in the order detection tries them (the first whose ``detect`` says yes wins, so a
specific test comes before a general one: ``.trace.json`` before ``.json``, spans before
agentic-coding documents, AIPerf and Bailian lines before Mooncake's). ``load_plan`` reads a
run folder or a trace file into a ReplayPlan; ``swarm replay``, ``swarm sweep --replay``,
``swarm fit`` and ``swarm realism`` all read through it. Adding a format is one module ending
in a ``FORMAT`` and its name here.
"""

from __future__ import annotations

from pathlib import Path

from swarm.errors import InputError
from swarm.replay import (
    agentic_coding_trace,
    aiperf_dag,
    azure,
    bailian_trace,
    burstgpt,
    from_run,
    mooncake,
    otel_spans,
    trtllm_trace,
)
from swarm.replay.format import Peek, ReadOptions, TraceFormat
from swarm.replay.plan import ReplayPlan, with_scaled_waits
from swarm.replay.reading import Filters

FORMATS: dict[str, TraceFormat] = {
    f.name: f
    for f in (
        trtllm_trace.FORMAT,
        otel_spans.FORMAT,
        agentic_coding_trace.FORMAT,
        from_run.FORMAT,
        aiperf_dag.FORMAT,
        bailian_trace.FORMAT,
        mooncake.FORMAT,
        azure.FORMAT,
        burstgpt.FORMAT,
    )
}
#: the formats of trace files (all but swarm's own run folders)
TRACE_FORMATS = tuple(name for name in FORMATS if name != from_run.FORMAT.name)


def trace_format(name: str) -> TraceFormat:
    """The format called ``name``, or an InputError listing them."""
    try:
        return FORMATS[name]
    except KeyError:
        raise InputError(f"unknown trace format {name!r} (known: {', '.join(FORMATS)})") from None


def detect_format(source: str) -> str:
    """The name of the first format (``FORMATS``'s order) that recognises ``source``."""
    peek = Peek(source)
    if peek.is_dir and (peek.path / "sweep.json").exists():
        raise InputError(f"{source}: a sweep folder; replay one of its run folders ({source}/runs/...)")
    for fmt in FORMATS.values():
        if fmt.detect(peek):
            return fmt.name
    raise InputError(f"{source}: cannot tell the trace format; pass --format {'|'.join(FORMATS)}")


def load_plan(source: str, fmt: str | None = None, options: ReadOptions | None = None) -> ReplayPlan:
    """The replay plan of ``source`` (a run folder, a trace file or folder) in format ``fmt``
    (detected when None); filters only where the format takes them."""
    chosen = trace_format(fmt or detect_format(source))
    options = options or ReadOptions()
    if not chosen.filters and options.filters != Filters(seed=options.filters.seed):
        flat = ", ".join(f.name for f in FORMATS.values() if f.filters)
        raise InputError(
            f"--limit, --window and --sample apply to flat traces ({flat}), not to {chosen.title}"
        )
    return chosen.read(source, options)


def import_trace(
    path: str | Path, fmt: str, filters: Filters | None = None, *, skip_bad_lines: bool = False
) -> ReplayPlan:
    """A trace file (or folder) in format ``fmt`` as a plan (``load_plan`` for trace formats)."""
    if fmt not in TRACE_FORMATS:
        raise InputError(f"unknown trace format {fmt!r} (known: {', '.join(TRACE_FORMATS)})")
    return load_plan(str(path), fmt, ReadOptions(filters or Filters(), skip_bad_lines))


def scale_waits(plan: ReplayPlan, factor: float) -> ReplayPlan:
    """``plan`` with its recorded waits times ``factor`` (and its offsets, where its format's
    offsets are sums of those waits)."""
    offsets = FORMATS[plan.source_format].offsets if plan.source_format in FORMATS else "arrivals"
    return with_scaled_waits(plan, factor, scale_offsets=offsets == "waits")
