"""Every DuckDB and polars snippet in docs/trace-schema.md runs against a real trace."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from swarm.trace.sink import ParquetTraceSink
from swarm.trace.synthetic import synthetic_record

DOC = Path(__file__).resolve().parents[1] / "docs" / "trace-schema.md"
BLOCKS = re.findall(r"```(sql|python)\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.fixture
def demo_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    run = tmp_path / "runs" / "demo"
    with ParquetTraceSink(run, batch_rows=100) as sink:
        for i in range(500):
            sink.write(synthetic_record(i))
    monkeypatch.chdir(tmp_path)
    return run


def test_doc_has_both_kinds_of_snippet() -> None:
    kinds = [k for k, _ in BLOCKS]
    assert kinds.count("sql") >= 3 and kinds.count("python") >= 2


@pytest.mark.parametrize(("kind", "code"), BLOCKS, ids=[f"{k}-{i}" for i, (k, _) in enumerate(BLOCKS)])
def test_snippet_runs(demo_run: Path, kind: str, code: str) -> None:
    if kind == "sql":
        rows = duckdb.connect().execute(code).fetchall()
        assert rows, "query returned no rows"
        assert all(v is not None for row in rows for v in row)
    else:
        exec(compile(code, str(DOC), "exec"), {})
