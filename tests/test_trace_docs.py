"""Every DuckDB and polars snippet in docs/trace-schema.md and docs/analysis.md runs against
a real trace, and the analysis answers agree with swarm's own metrics."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import duckdb
import pytest

from bench.synthetic import synthetic_record
from swarm.analysis import metrics as m
from swarm.trace.reader import read_requests
from swarm.trace.sink import ParquetTraceSink

DOCS = Path(__file__).resolve().parents[1] / "docs"
SNIPPETS = [
    (doc, kind, code)
    for doc in (DOCS / "trace-schema.md", DOCS / "analysis.md")
    for kind, code in re.findall(r"```(sql|python)\n(.*?)```", doc.read_text(), flags=re.S)
]


@pytest.fixture
def demo_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    run = tmp_path / "runs" / "demo"
    with ParquetTraceSink(run, batch_rows=100) as sink:
        for i in range(500):
            sink.write(synthetic_record(i))
    monkeypatch.chdir(tmp_path)
    return run


def _snippets(doc: str, kind: str) -> list[str]:
    return [code for d, k, code in SNIPPETS if d.name == doc and k == kind]


def test_docs_have_both_kinds_of_snippet() -> None:
    assert len(_snippets("trace-schema.md", "sql")) >= 3 and len(_snippets("trace-schema.md", "python")) >= 2
    # five questions in the analysis guide
    assert len(_snippets("analysis.md", "sql")) + len(_snippets("analysis.md", "python")) >= 5


@pytest.mark.parametrize(
    ("doc", "kind", "code"), SNIPPETS, ids=[f"{d.stem}-{k}-{i}" for i, (d, k, _) in enumerate(SNIPPETS)]
)
def test_snippet_runs(demo_run: Path, doc: Path, kind: str, code: str) -> None:
    if kind == "sql":
        rows = duckdb.connect().execute(code).fetchall()
        assert rows, "query returned no rows"
        assert all(v is not None for row in rows for v in row)
    else:
        exec(compile(code, str(doc), "exec"), {})


def _exec(code: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(code, "analysis.md", "exec"), namespace)
    return namespace


def test_analysis_answers_agree_with_swarm_metrics(demo_run: Path) -> None:
    table = read_requests(demo_run)
    slo_share, peak = (_exec(code) for code in _snippets("analysis.md", "python"))
    assert slo_share["share"]["good_share"][0] == pytest.approx(
        m.goodput(table, m.SLO(ttft_ms=200, itl_ms=50))["good_fraction"]
    )
    assert peak["per_second"]["peak_output_tokens_per_s"][0] == pytest.approx(
        m.throughput(table)["peak_output_tokens_per_s"]
    )
    branch = duckdb.connect().execute(_snippets("analysis.md", "sql")[0]).fetchall()
    calls = m.first_and_branch_calls(table)["branch"]
    assert branch[0][1] == m.ok_rows(calls).num_rows
    assert branch[0][2] == pytest.approx(m.distribution(m.ttft_ms(calls))["p50"])
    sessions = duckdb.connect().execute(_snippets("analysis.md", "sql")[2]).fetchall()[0]
    s = m.sessions(table)
    assert sessions[0] == s["calls"].size
    assert sessions[2] == pytest.approx(m.distribution(s["completion_ms"] / 1000)["p50"])
