"""`swarm realism` against published figures: a study's medians, quantiles and hit ratios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarm.cli.app import app
from swarm.errors import InputError
from swarm.shape.features import features
from swarm.shape.figures import FigureSet, FiguresFile, hold, load_figures, pick_set, statistic
from swarm.shape.table import ShapeRow, ShapeTable


def table(sessions: list[list[tuple[int, int]]]) -> ShapeTable:
    """Sessions of (prompt, cached within the session) requests."""
    rows = [
        ShapeRow(f"s{i}", (), prompt, 10, cached, 0.0, None, session_cached_tokens=cached)
        for i, reqs in enumerate(sessions)
        for prompt, cached in reqs
    ]
    return ShapeTable(rows, "t", "trace")


def test_the_optimal_hit_is_per_session_alone_averaged_over_sessions() -> None:
    values = features(table([[(100, 0), (200, 100)], [(1000, 0), (1000, 900), (1000, 950)]]))
    # (0 + 100) / 300 and (900 + 950) / 3000: the mean of the two, not the pooled share
    assert values["session_alone_hit"] == pytest.approx([1 / 3, 1850 / 3000])
    assert statistic(values["session_alone_hit"], "mean") == pytest.approx((1 / 3 + 1850 / 3000) / 2)


def test_each_figure_gets_a_verdict_by_its_relative_error() -> None:
    fset = FigureSet.model_validate(
        {"figures": [
            {"feature": "prompt_tokens", "stat": "p50", "value": 1000},  # candidate 1000: match
            {"feature": "output_tokens", "stat": "p50", "value": 8},  # 10 vs 8: 25 %, near
            {"feature": "session_alone_hit", "stat": "mean", "value": 0.1},  # far
            {"feature": "gap_s", "stat": "p50", "value": 5},  # no gaps: n/a
        ]}
    )  # fmt: skip
    figures = FiguresFile(source="a study", sets={"w": fset})
    values = features(table([[(1000, 0), (1000, 900)], [(1000, 0), (1000, 900)]]))
    report = hold(values, figures, "w", fset, "cand")
    assert [r.verdict for r in report.rows] == ["match", "near", "far", "n/a"]
    assert report.verdict == "far" and report.far == ["session_alone_hit mean"]
    loose = hold(values, figures.model_copy(update={"tolerance": 5.0}), "w", fset, "cand")
    assert loose.verdict == "close"


def test_the_shipped_figures_files_load_and_name_their_sources() -> None:
    for name, sets in (("trtllm_agentic", 4), ("claude_code", 1)):
        figures, path = load_figures(name)
        assert len(figures.sets) == sets
        assert "Table 1" in figures.source or "README" in figures.source
        assert Path(path).is_file()
        assert all(f.note for s in figures.sets.values() for f in s.figures)


def test_a_figures_file_with_an_unknown_or_malformed_field_is_refused_naming_both(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("source: s\nsets:\n  w:\n    figures:\n      - {feature: prompt_tokens, stat: p50, valu: 3}\n")
    with pytest.raises(InputError, match=r"bad.yaml: sets.w.figures.0.valu"):
        load_figures(str(bad))
    bad.write_text("source: s\nsets:\n  w:\n    figures:\n      - {feature: prompt_len, stat: p50, value: 3}\n")
    with pytest.raises(InputError, match=r"bad.yaml: sets.w.figures.0.feature: .*unknown feature 'prompt_len'"):
        load_figures(str(bad))
    bad.write_text("source: s\nsets:\n  w:\n    figures:\n      - {feature: prompt_tokens, stat: median, value: 3}\n")
    with pytest.raises(InputError, match=r"bad.yaml: sets.w.figures.0.stat"):
        load_figures(str(bad))


def test_realism_against_a_figures_file_prints_a_verdict_per_figure(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("workload: {mix: [{profile: support_agent, topology: react}]}\n")
    runner = CliRunner()
    result = runner.invoke(app, ["realism", str(spec), "--against", "trtllm_agentic", "--read-agents", "5"])
    assert isinstance(result.exception, InputError) and "--set (coder, deep_research" in str(result.exception)
    result = runner.invoke(
        app, ["realism", str(spec), "--against", "trtllm_agentic", "--set", "coder", "--read-agents", "5"]
    )
    assert result.exit_code == 0, result.output
    assert "optimal hit per session alone mean" in result.output and "verdict:" in result.output
    result = runner.invoke(
        app,
        ["realism", str(spec), "--against", "trtllm_agentic", "--set", "coder", "--read-agents", "5", "--json"],
    )
    report = json.loads(result.output)
    assert [r["feature"] for r in report["rows"]] == ["prompt_tokens", "output_tokens", "session_alone_hit"]
    assert report["set"] == "coder"
    result = runner.invoke(app, ["realism", str(spec), "--against", str(spec), "--set", "coder"])
    assert isinstance(result.exception, InputError) and "not a figures file" in str(result.exception)


@pytest.mark.parametrize("profile", ["coder", "deep_research", "iter_research", "tree_of_thought"])
def test_each_study_profile_is_within_15_percent_of_every_published_figure(profile: str) -> None:
    from swarm.shape.table import table_from_spec
    from swarm.workload.workload import MixEntry, WorkloadSpec

    figures, path = load_figures("trtllm_agentic")
    name, fset = pick_set(figures, path, profile)
    assert fset.profile == profile
    spec = WorkloadSpec(agents=20, mix=[MixEntry(profile=profile)])  # the profile's own topology
    report = hold(features(table_from_spec(spec, "spec")), figures, name, fset, profile)
    assert [(r.feature, r.verdict) for r in report.rows if r.verdict != "match"] == []
    assert {r.feature for r in report.rows} == {"prompt_tokens", "output_tokens", "session_alone_hit"}


def test_older_built_ins_are_labelled_synthetic_and_new_ones_name_their_source() -> None:
    from swarm.workload.catalog import default_catalog

    catalog = default_catalog()
    for name in catalog.profile_names():
        p = catalog.profile(name)
        assert p.synthetic != bool(p.source), name
    assert catalog.profile("math_reasoner").synthetic and not catalog.profile("coder").synthetic


def test_fit_reads_a_prompt_drop_as_compaction_and_an_idle_gap_as_no_think_time() -> None:
    from swarm.shape.fit import IDLE_GAP_S, fit_table, profile_yaml

    rows, prompt = [], 1000
    for s in range(4):  # sessions of 12 calls growing by 1,000 tokens, compacted at 8,000
        base = len(rows)
        prompt = 1000
        for k in range(12):
            parents = (base + k - 1,) if k else ()
            drop = prompt > 8000
            prompt = 1000 + 1500 if drop else prompt + (1000 if k else 0)
            gap = (IDLE_GAP_S * 10 if k == 5 and s == 0 else 5.0) if k else None
            rows.append(
                ShapeRow(f"s{s}", parents, prompt, 50, 0, 0.0, gap, context_parents=() if drop or not k else parents)
            )
    fit = fit_table(ShapeTable(rows, "t", "trace"), "x")
    assert fit.compaction is not None
    assert fit.compaction.threshold_tokens > 7000
    assert "compaction:" in profile_yaml(fit) and "threshold_tokens" in profile_yaml(fit)
    assert any("1 waits longer than" in n for n in fit.notes)
    assert max(fit.tool_time_s.data.get("quantiles", [fit.tool_time_s.data.get("value", 0)])) <= IDLE_GAP_S


def test_claude_code_runs_by_name_with_its_fitted_topologies_sub_agents_and_compaction() -> None:
    from swarm.workload.workload import MixEntry, Workload, WorkloadSpec

    wl = Workload(WorkloadSpec(agents=60, mix=[MixEntry(profile="claude_code")]))
    profile = wl.profiles[0]
    assert profile.compaction is not None and profile.compaction.threshold_tokens > 100_000
    assert profile.subagent_system_prompt is not None
    drawn = {wl.agent(i).topology.name for i in range(60)}
    assert len(drawn) > 5 and all(n.startswith("claude_code-") for n in drawn)
    assert any(wl.agent(i).topology.spawns for i in range(60))  # sub-agents, as recorded
    # the same agent draws the same topology in any process
    again = Workload(WorkloadSpec(agents=60, mix=[MixEntry(profile="claude_code")]))
    assert [again.agent(i).topology.name for i in range(60)] == [wl.agent(i).topology.name for i in range(60)]
