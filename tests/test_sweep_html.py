"""The sweep report's HTML page (``swarm report SWEEP_DIR --html``) on hand-built report dicts,
and in a real headless Chromium."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import pytest
from browser import chromium_path, visit

from swarm.sweep.html import EMULATOR_NOTE, MISSING, render_sweep_html

ERROR_REASON = "error share 12.0% above the bound 5.0%"


def _point(
    index: int, load: float, scale: float, *, valid: bool = True, hit_vs_ideal: float = 1.0
) -> dict[str, Any]:
    """One point as ``PointResult.as_dict`` writes it, figures growing with ``load × scale``."""
    figures = {
        "requests_per_s": load * scale,
        "output_tokens_per_s": 100 * load * scale,
        "tasks.per_hour": 1000 * load * scale,
        "tasks.completion_ms.p50": 2000 + 500 * load,
        "ttft_ms.p50": 10 * load,
        "ttft_ms.p99": 40 * load,
        "itl_ms.p50": 4.0,
        "tpot_ms.p99": 5 + load,
        "interactivity_tokens_per_s": 250 - 10 * load,
        "hit_ratio": 0.8 * hit_vs_ideal,
        "ideal_hit_ratio": 0.8,
        "hit_vs_ideal": hit_vs_ideal,
        "misses.lost_share": 1 - hit_vs_ideal,
        "misses.compulsory_share": hit_vs_ideal,
        "goodput.per_s": load * scale * 0.9,
    }
    return {
        "index": index,
        "load": load,
        "run_dir": f"runs/p{index:02d}",
        "valid": valid,
        "reasons": [] if valid else [ERROR_REASON],
        "window": {},
        "figures": figures,
        "whole_run": {},
        "engine": {"kv_usage": 0.1 * load / 4, "queue": load / 8},
        "working_set": None,
    }


def _report(a: str = "sglang-a", b: str = "trtllm-b") -> dict[str, Any]:
    """Two targets, three points each: ``a``'s top point invalid, ``b`` with a cliff at 12
    (predicted at 10), capacity 6.5 for ``a`` and at least 16 for ``b``, one crossover at 5.5."""
    return {
        "sweep": {
            "folder": "/tmp/sweeps/sw-test",
            "sweep_id": "sw-test",
            "kind": "run",
            "knob": "agents",
            "status": "stopped",
            "status_reason": "Ctrl-C at point 6",
            "seed": 7,
            "slos": ["ttft:500ms"],
            "slo_percentile": "p99",
            "steady_rule": "from the first time requests in flight reach 0.8 x their median",
            "cliff_fraction": 0.5,
            "kv_budget_tokens": 40000,
            "loads": [4.0, 8.0, 16.0],
        },
        "targets": {
            a: {
                "engine": "sglang",
                "points": [_point(0, 4, 1.0), _point(1, 8, 1.0), _point(2, 16, 1.0, valid=False)],
                "fronts": {"throughput_vs_interactivity": [4.0, 8.0], "tasks_vs_completion_time": [8.0]},
                "capacity": {
                    "load": 6.5,
                    "at_least": False,
                    "limiting": "ttft_ms.p99 <= 500",
                    "between": [4.0, 8.0],
                    "text": "6.5 (limited by ttft_ms.p99 <= 500)",
                },
                "cliff": None,
                "predicted_cliff": None,
                "stopped_by": None,
            },
            b: {
                "engine": "trtllm",
                "points": [
                    _point(3, 4, 0.8),
                    _point(4, 8, 1.2, hit_vs_ideal=0.9),
                    _point(5, 16, 1.3, hit_vs_ideal=0.2),
                ],
                "fronts": {
                    "throughput_vs_interactivity": [4.0, 8.0, 16.0],
                    "tasks_vs_completion_time": [16.0],
                },
                "capacity": {
                    "load": 16.0,
                    "at_least": True,
                    "limiting": None,
                    "between": None,
                    "text": "at least the top load 16: no point failed an SLO",
                },
                "cliff": {
                    "load": 12.0,
                    "figure": "hit_vs_ideal",
                    "fraction": 0.5,
                    "base": 1.0,
                    "threshold": 0.5,
                    "between": [8.0, 16.0],
                    "kv_usage_there": 0.93,
                },
                "predicted_cliff": {
                    "load": 10.0,
                    "budget_tokens": 40000,
                    "from_load": 4.0,
                    "sessions": 4,
                    "per_session_tokens": 3900.0,
                    "shared_tokens": 1000.0,
                },
                "stopped_by": "TTFT p99 above 4x the SLO",
            },
        },
        "crossover_figure": "goodput.per_s",
        "crossovers": [
            {
                "targets": [a, b],
                "load": 5.5,
                "figure": "goodput.per_s",
                "leader_before": a,
                "leader_after": b,
                "between": [4.0, 8.0],
            }
        ],
        "capacity_ratios": {f"{b} / {a}": 16.0 / 6.5},
        "invalid_points": [f"{a} at 16: {ERROR_REASON}"],
    }


def _points_of(page: str, label: str) -> list[int]:
    """The number of points each series of that label holds, plot by plot (``svgplot``'s
    ``data-points``)."""
    return [int(n) for n in re.findall(rf'data-series="{re.escape(label)}" data-points="(\d+)"', page)]


def test_page_shows_every_target_its_points_and_the_verdicts() -> None:
    page = render_sweep_html(_report())
    # header
    for text in ("sw-test", "agents", "stopped", "Ctrl-C at point 6", "ttft:500ms", "p99", "40,000 tokens",
                 "reach 0.8 x their median"):  # fmt: skip
        assert text in page, text
    # one table per target, every point a row; the invalid one marked with its reason
    for name in ("sglang-a", "trtllm-b"):
        assert f'<table class="points" data-target="{name}">' in page
    assert page.count("<tr class=") == 6
    invalid_rows = re.findall(r'<tr class="invalid" data-load="16">.*?</tr>', page)
    assert len(invalid_rows) == 1 and f"NO: {ERROR_REASON}" in invalid_rows[0]
    assert "TTFT p99" in page and "compulsory" in page and "goodput/s" in page and "KV use" in page
    assert "TTFT p99 above 4x the SLO" in page  # why b's ladder stopped
    # verdicts: capacity and its ratio, the cliff found (with the KV usage there) and predicted,
    # the crossover, the invalid point
    assert "6.5 (limited by ttft_ms.p99 &lt;= 500)" in page
    assert "at least the top load 16: no point failed an SLO" in page
    assert "trtllm-b / sglang-a = 2.46x" in page
    assert "found at agents = 12 (between 8 and 16" in page and "KV usage there 93.0%" in page
    assert "predicted at 10 (working set at load 4" in page
    assert "trtllm-b overtakes sglang-a at agents = 5.5 (between 4 and 8)" in page
    assert f"sglang-a at 16: {ERROR_REASON}" in page
    assert EMULATOR_NOTE not in page  # neither target is the emulator


def test_invalid_points_are_left_out_of_the_curves_and_the_marks_are_drawn() -> None:
    page = render_sweep_html(_report())
    assert page.count('<figure class="plot"') == 4
    # the two fronts: every valid point, and the loads on the front
    assert _points_of(page, "sglang-a: valid points by load") == [2, 2]  # 16 is invalid
    assert _points_of(page, "trtllm-b: valid points by load") == [3, 3]
    assert _points_of(page, "sglang-a: Pareto front") == [2, 1]
    assert _points_of(page, "trtllm-b: Pareto front") == [3, 1]
    assert _points_of(page, "sglang-a: realised / ideal hit") == [2]
    assert _points_of(page, "sglang-a") == [2] and _points_of(page, "trtllm-b") == [3]  # goodput
    marks = dict(re.findall(r'<path class="series mark" data-series="([^"]+)" data-points="(\d+)"', page))
    assert set(marks) == {
        "trtllm-b: cliff at 12 (KV use there 93.0%)",
        "predicted cliff at 10 (working set vs KV budget)",
        "sglang-a: capacity at SLO 6.5",
        "trtllm-b: capacity at SLO &gt;= 16",
        "crossover: trtllm-b leads from 5.5",
    }
    assert "goodput/s (requests meeting the SLO) vs load" in page


def test_user_strings_are_escaped() -> None:
    evil = "<script>alert(1)</script>"
    report = _report(a=evil)
    report["sweep"]["status_reason"] = '<img src=x onerror="boom">'
    report["targets"][evil]["points"][2]["reasons"] = ["<b>late</b>"]
    page = render_sweep_html(report)
    assert "<script" not in page and "<img" not in page and "<b>late" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;late&lt;/b&gt;" in page


def test_missing_values_and_a_target_without_points_render() -> None:
    report = _report()
    nothing = copy.deepcopy(report["targets"]["sglang-a"]["points"][0])
    nothing["figures"] = dict.fromkeys(nothing["figures"])
    nothing["engine"] = {"kv_usage": None, "queue": None}
    report["targets"]["sglang-a"]["points"] = [nothing]
    report["targets"]["trtllm-b"].update(
        points=[], capacity=None, cliff={"load": None}, predicted_cliff={"load": None}, fronts={}
    )
    report["sweep"].update(kv_budget_tokens=None, seed=None, status_reason=None, slos=[])
    page = render_sweep_html(report)
    assert MISSING in page and "None" not in page
    assert "No point done for this target." in page
    assert "<dt>KV budget</dt>" not in page
    assert "Not plotted:" in page  # no valid figure anywhere: the plots say why they are absent
    # the barest report still renders
    assert "<h1>swarm sweep: sweep</h1>" in render_sweep_html({})
    assert "No target in this sweep." in render_sweep_html({"sweep": {"sweep_id": "x"}, "targets": {}})


def test_the_emulator_is_named_as_a_model() -> None:
    page = render_sweep_html(_report(a="emulator-sglang"))
    assert EMULATOR_NOTE in page and "emulator-sglang (sglang) (emulated)" in page
    report = _report()
    report["targets"]["trtllm-b"]["emulated"] = True
    assert EMULATOR_NOTE in render_sweep_html(report)


def test_sweep_page_in_headless_chromium(tmp_path: Path) -> None:
    if chromium_path() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: .ci/run installs Debian's chromium")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    page = tmp_path / "sweep.html"
    page.write_text(render_sweep_html(_report()), encoding="utf-8")
    text = page.read_text()
    assert "<script" not in text and "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    seen = visit(
        page,
        "Array.from(document.querySelectorAll('figure.plot')).map(f => ({id: f.id, "
        "svgs: f.querySelectorAll(':scope > svg').length, "
        "points: Array.from(f.querySelectorAll('path.series:not(.mark)')).map(p => Number(p.dataset.points)), "
        "marks: f.querySelectorAll('path.mark').length, width: f.getBoundingClientRect().width}))",
        tmp_path / "sweep.png",
        tmp_path / "chromium-profile",
    )
    assert seen.errors == []
    plots = {p["id"]: p for p in seen.value}
    assert set(plots) == {
        "front-throughput-interactivity",
        "front-tasks-completion",
        "hit-vs-load",
        "capacity-vs-load",
    }
    for plot_id, plot in plots.items():
        assert plot["svgs"] == 1, plot_id
        assert plot["points"] and all(n > 0 for n in plot["points"]), plot_id
        assert plot["width"] > 100, plot_id
    assert plots["hit-vs-load"]["marks"] == 2 and plots["capacity-vs-load"]["marks"] == 3
    assert seen.screenshot is not None and seen.screenshot.stat().st_size > 10_000
