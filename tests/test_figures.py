"""`swarm realism` against published figures: a study's medians, quantiles and hit ratios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarm.cli.app import app
from swarm.errors import InputError
from swarm.shape.features import features
from swarm.shape.figures import FigureSet, FiguresFile, hold, load_figures, statistic
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
