"""One registered entry per trace format and one module per engine: what each declares is what the
readers of formats and engines use, and nothing else knows a format or an engine by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from swarm.engines.engine import Served
from swarm.engines.registry import ENGINES, get_engine
from swarm.replay.format import ReadOptions, TraceFormat
from swarm.replay.formats import FORMATS, detect_format, trace_format

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
PACKAGE = ROOT / "swarm"

#: a fixture of each trace format under tests/data (the swarm format: a run folder, made below)
FIXTURES = {
    "trtllm": DATA / "trtllm" / "django__django-16801.trace.json",
    "otel_genai": DATA / "otel_genai" / "release-agent.json",
    "agentic_coding": DATA / "agentic_coding" / "fixture-subagents.json",
    "aiperf_dag": DATA / "aiperf_dag" / "agent-tree.dag.jsonl",
    "bailian": DATA / "bailian" / "two-conversations_blksz_16.jsonl",
    "mooncake": DATA / "mooncake_conversation_first300.jsonl",
}


def _format_modules() -> dict[str, str]:
    """Module file -> the name of the ``FORMAT`` it declares, for every module of swarm/replay/
    that declares one."""
    import importlib

    out = {}
    for path in sorted((PACKAGE / "replay").glob("*.py")):
        module = importlib.import_module(f"swarm.replay.{path.stem}")
        fmt = getattr(module, "FORMAT", None)
        if fmt is not None:
            assert isinstance(fmt, TraceFormat), path
            out[path.name] = fmt.name
    return out


def test_every_format_module_is_registered_once() -> None:
    declared = _format_modules()
    assert sorted(declared.values()) == sorted(FORMATS)
    assert len(set(declared.values())) == len(declared)  # one module per format


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_each_format_recognises_its_fixture_and_reads_it(name: str) -> None:
    path = FIXTURES[name]
    assert detect_format(str(path)) == name
    plan = trace_format(name).read(str(path), ReadOptions())
    assert plan.items and plan.source_format == name and plan.default_mode == trace_format(name).default_mode


def test_csv_formats_are_told_apart_by_their_header(tmp_path: Path) -> None:
    azure = tmp_path / "a.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    burst = tmp_path / "b.csv"
    burst.write_text("Timestamp,Model,Request tokens,Response tokens\n5,ChatGPT,472,18\n")
    assert (detect_format(str(azure)), detect_format(str(burst))) == ("azure", "burstgpt")


def test_a_formats_properties_are_what_its_plans_do() -> None:
    """Filters apply where offsets are arrivals; waits are scaled into the offsets of the formats
    whose offsets sum them."""
    for fmt in FORMATS.values():
        if fmt.filters:
            assert fmt.default_mode == "timed" and fmt.offsets == "arrivals", fmt.name
    assert {f.name for f in FORMATS.values() if f.offsets == "waits"} == {"trtllm", "aiperf_dag"}


def test_the_trace_formats_page_names_every_format() -> None:
    text = (ROOT / "docs" / "trace-formats.md").read_text()
    table = text.split("\n## ", 1)[0]
    for name in FORMATS:
        assert f"`{name}`" in table or f"`--format {name}`" in table, name


def test_no_module_outside_its_formats_branches_on_a_format_name() -> None:
    """What a format is, is in its module: no other module compares ``source_format`` or a
    format argument with a format's name."""
    names = "|".join(sorted(FORMATS))
    pattern = re.compile(rf"""(source_format|fmt|format)\s*(==|!=|in)\s*\(?["']({names})["']""")
    wrong = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in PACKAGE.rglob("*.py")
        for m in pattern.finditer(p.read_text())
        if p.parent.name != "replay"
    ]
    assert wrong == []


# --- engines ----------------------------------------------------------------------------------


def test_the_engine_metrics_reader_reads_the_engine_modules_names() -> None:
    from swarm.analysis import engine_metrics as em

    for engine in ENGINES.values():
        for meaning, names in (("waiting", em.QUEUE_GAUGES), ("running", em.RUNNING_GAUGES), ("kv_usage", em.KV_USAGE_GAUGES)):
            assert set(engine.names_of(meaning)) <= set(names), (engine.name, meaning)  # type: ignore[arg-type]
        hits = engine.metric("cached_tokens")
        if hits is not None:
            assert hits.name in {h for h, _, _ in em.CACHE_COUNTERS}, engine.name
        else:
            assert set(engine.names_of("cache_hit_rate")) <= set(em.CACHE_GAUGES), engine.name


def test_the_emulators_profiles_serve_their_engine_modules_names() -> None:
    from swarm.emulator.behaviour import BEHAVIOURS

    for name, behaviour in BEHAVIOURS.items():
        assert behaviour.engine is get_engine(name)
        assert behaviour.metrics == get_engine(name).metrics


@pytest.mark.parametrize(
    "responses,engine",
    [
        ({"/metrics": (200, b"vllm:num_requests_running 0\n"), "/server_info": (200, b"{}")}, "vllm"),
        ({"/get_server_info": (200, b'{"version": "0.5"}')}, "sglang"),
        ({"/props": (200, b'{"build_info": "b1"}')}, "llamacpp"),
        ({"/prometheus/metrics": (200, b"trtllm_num_requests_running 0\n")}, "trtllm"),
    ],
    ids=["vllm-dev-mode", "sglang", "llamacpp", "trtllm"],
)
def test_each_engine_is_recognised_by_its_own_signs(responses: dict[str, tuple[int, bytes]], engine: str) -> None:
    served = Served(responses)
    found = [e.name for e in ENGINES.values() if e.identify(served) is not None]
    assert found[0] == engine  # the first in the registry's order is the one the probe picks


def test_no_module_outside_the_engine_modules_branches_on_an_engine_name() -> None:
    names = "|".join(sorted(ENGINES))
    pattern = re.compile(rf"""\.engine\s*(==|!=)\s*["']({names})["']""")
    wrong = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in PACKAGE.rglob("*.py")
        for m in pattern.finditer(p.read_text())
        if p.parent.name != "engines"
    ]
    assert wrong == []
