"""Metric functions on hand-built traces whose answers are known by construction."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from swarm.analysis import metrics as m
from swarm.analysis.figures import breakdown, target_figures
from swarm.trace.schema import TRACE_SCHEMA

MS = 1_000_000
S = 1_000_000_000
#: Wall-clock nanoseconds of today: above 2**53, where float64 would lose precision.
WALL = 1_795_987_208_128_635_443


def _row(**fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": "r", "target": "a", "engine": "sglang", "worker": 0, "agent_id": 0, "profile": "p",
        "topology": "t", "session_id": "", "node": "n", "parent_nodes": [], "depth": 0, "branch": 0,
        "role": "expand", "system_prompt_id": 0, "request_id": "x", "dialect": "openai-chat", "model": "m",
        "stream": True, "scheduled_ns": 0, "sent_ns": 0, "queue_ns": 0, "ttft_ns": None, "e2e_ns": None,
        "chunk_ns": [], "max_tokens": None, "prompt_tokens": None, "completion_tokens": None,
        "cached_tokens": None, "prompt_tokens_est": None, "ideal_cached_tokens_est": None,
        "block_hashes": [], "status": "ok", "http_status": 200, "error": None, "finish_reason": None,
        "prompt_parts": None, "prompt_roles": None, "output_text": None,
    }  # fmt: skip
    row.update(fields)
    row["sent_ns"] += WALL
    row["scheduled_ns"] += WALL
    return row


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=TRACE_SCHEMA)


def _streamed(
    sent_s: float, ttft_ms: float, gaps_ms: list[float], tokens: int, **fields: Any
) -> dict[str, Any]:
    chunks = [int(ttft_ms * MS)]
    for g in gaps_ms:
        chunks.append(chunks[-1] + int(g * MS))
    return _row(
        sent_ns=int(sent_s * S), ttft_ns=chunks[0], e2e_ns=chunks[-1], chunk_ns=chunks,
        completion_tokens=tokens, **fields,
    )  # fmt: skip


def test_distribution_is_exact_on_known_values() -> None:
    d = m.distribution(np.arange(1, 101, dtype=float))  # 1..100
    assert d["count"] == 100 and d["mean"] == 50.5 and d["max"] == 100
    assert d["p50"] == pytest.approx(50.5)
    assert d["p90"] == pytest.approx(90.1)
    assert d["p99"] == pytest.approx(99.01)
    assert d["p99.9"] == pytest.approx(99.901)
    assert m.distribution([])["p50"] is None


def test_latencies_use_ok_rows_and_itl_never_crosses_rows() -> None:
    table = _table(
        [
            _streamed(0.0, 100, [10, 20], tokens=3),
            _streamed(0.5, 300, [40], tokens=2),
            _row(sent_ns=S, status="timeout", ttft_ns=5 * MS, e2e_ns=9 * MS, queue_ns=7 * MS),
        ]
    )
    assert sorted(m.ttft_ms(table)) == [100, 300]
    assert sorted(m.itl_ms(table)) == [10, 20, 40]  # not the 300-130 step between rows
    assert sorted(m.e2e_ms(table)) == [130, 340]
    # TPOT: (e2e - ttft) / (tokens - 1)
    assert sorted(m.tpot_ms(table)) == [15, 40]
    assert sorted(m.queue_ms(table)) == [0, 0, 7]  # every row, failures included


def test_throughput_overall_and_peak_window() -> None:
    # row 1: 4 chunks in the first second carrying 8 tokens (2 each);
    # row 2: sent at 1.5 s, 2 chunks carrying 10 tokens (5 each), ending at 2.0 s
    table = _table(
        [
            _streamed(0.0, 100, [100, 100, 100], tokens=8, prompt_tokens=100),
            _streamed(1.5, 400, [100], tokens=10, prompt_tokens=50),
        ]
    )
    t = m.throughput(table)
    assert m.span_s(table) == pytest.approx(2.0)
    assert t["output_tokens_per_s"] == pytest.approx(18 / 2.0)
    assert t["total_tokens_per_s"] == pytest.approx((18 + 150) / 2.0)
    assert t["requests_per_s"] == pytest.approx(1.0)
    # windows [0,1): 8 tokens; [1,2): 5 (chunk at 1.9 s); [2,3): 5 (chunk at 2.0 s)
    assert t["peak_output_tokens_per_s"] == pytest.approx(8)
    tl = m.timeline(table, bin_s=1.0)
    assert tl["t_s"] == [0.0, 1.0, 2.0]
    assert tl["output_tokens_per_s"] == pytest.approx([8, 5, 5])
    assert tl["in_flight"] == [1, 0, 0]  # at t=0 row 1; at t=1 none (row 1 ended at 0.4 s)


def test_goodput_under_slos() -> None:
    table = _table(
        [
            _streamed(0.0, 100, [10, 10], tokens=3),  # good
            _streamed(0.0, 250, [10, 10], tokens=3),  # TTFT over
            _streamed(0.0, 100, [90, 90], tokens=3),  # mean ITL over
            _streamed(0.0, 100, [], tokens=1),  # one chunk: meets the ITL bound trivially
            _row(sent_ns=S, status="http_error", e2e_ns=0),  # failed: never good
        ]
    )
    slo = m.parse_slos(["ttft:200ms", "itl:0.05s"])
    assert slo == m.SLO(ttft_ms=200, itl_ms=50)
    g = m.goodput(table, slo)
    assert g["good"] == 2 and g["good_fraction"] == pytest.approx(2 / 5)
    assert g["request_goodput_per_s"] == pytest.approx(2 / m.span_s(table))
    assert g["token_goodput_per_s"] == pytest.approx(4 / m.span_s(table))
    assert list(m.good_mask(table, m.SLO(tpot_ms=20))) == [True, True, False, True, False]


@pytest.mark.parametrize("bad", ["ttft", "ttft:", "ttft:fast", "speed:1ms", "ttft:-1ms"])
def test_bad_slos_are_named(bad: str) -> None:
    with pytest.raises(ValueError, match="--slo"):
        m.parse_slos([bad])


def test_errors_by_status() -> None:
    table = _table([_row(status="ok"), _row(status="ok"), _row(status="timeout"), _row(status="http_error")])
    e = m.errors(table)
    assert e["by_status"] == {"http_error": 1, "ok": 2, "timeout": 1}
    assert e["error_rate"] == pytest.approx(0.5)
    assert e["rates"]["timeout"] == pytest.approx(0.25)


def test_cache_realised_and_ideal_on_reporting_rows_only() -> None:
    table = _table(
        [
            _row(prompt_tokens=100, cached_tokens=0, prompt_tokens_est=100, ideal_cached_tokens_est=0),
            _row(prompt_tokens=100, cached_tokens=64, prompt_tokens_est=100, ideal_cached_tokens_est=90),
            _row(prompt_tokens=100, cached_tokens=None, prompt_tokens_est=100, ideal_cached_tokens_est=90),
            _row(status="timeout", prompt_tokens=100, cached_tokens=100),
        ]
    )
    c = m.cache(table)
    assert c["hit_ratio"] == pytest.approx(64 / 200)
    assert c["ideal_hit_ratio"] == pytest.approx(90 / 200)
    assert c["prefill_tokens_saved"] == 64 and c["reporting_rows"] == 2


def test_sessions_completion_and_calls() -> None:
    table = _table(
        [
            _row(session_id="s1", sent_ns=1 * S, e2e_ns=1 * S),
            _row(session_id="s1", sent_ns=3 * S, e2e_ns=2 * S),  # ends at 5 s
            _row(session_id="s2", sent_ns=2 * S, e2e_ns=S // 2),
            _row(session_id="", sent_ns=0, e2e_ns=S),  # not an agent's (e.g. an imported trace)
        ]
    )
    s = m.sessions(table)
    assert sorted(s["completion_ms"]) == [500, 4000]
    assert sorted(s["calls"]) == [1, 2]


def test_first_and_branch_calls_and_breakdown_by_depth() -> None:
    table = _table(
        [
            _streamed(0, 200, [], 1, depth=0, prompt_tokens=100, cached_tokens=0),
            _streamed(0, 50, [], 1, depth=1, parent_nodes=["root"], prompt_tokens=100, cached_tokens=80),
            _streamed(0, 70, [], 1, depth=1, parent_nodes=["root"], prompt_tokens=100, cached_tokens=90),
        ]
    )
    calls = m.first_and_branch_calls(table)
    assert list(m.ttft_ms(calls["first"])) == [200]
    assert sorted(m.ttft_ms(calls["branch"])) == [50, 70]
    rows = m.breakdown(table, "depth")
    assert [r["depth"] for r in rows] == [0, 1]
    assert rows[1]["requests"] == 2 and rows[1]["ttft_ms"]["p50"] == pytest.approx(60)
    assert rows[1]["cache"]["hit_ratio"] == pytest.approx(170 / 200)
    figures = target_figures(table, m.SLO(ttft_ms=100))
    assert figures.goodput is not None and figures.goodput.good == 2
    assert figures.branch_call_ttft_ms is not None and figures.branch_call_ttft_ms.count == 2
    fig = figures.as_dict()  # the JSON shape of swarm report
    assert fig["goodput"]["good"] == 2
    assert fig["branch_call_ttft_ms"]["count"] == 2
    assert [r.as_dict("depth") for r in breakdown(table, "depth")] == rows


def test_figures_over_every_chunk_are_the_same_read_a_few_rows_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """ITL, each row's mean ITL and the tokens per window are read a piece of rows at a time
    (a large run's millions of chunk times are not copied whole): pieces that cut between
    any two rows, past failed rows and rows without chunks, give what the whole table gives."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(23):
        if i % 5 == 3:
            rows.append(_row(sent_ns=i * S // 4, status="timeout", chunk_ns=[1, 2, 3], completion_tokens=3))
        elif i % 7 == 2:
            rows.append(_streamed(i / 4, 50, [], tokens=1))  # one chunk: no ITL
        elif i % 11 == 4:
            rows.append(_row(sent_ns=i * S // 4, chunk_ns=[], completion_tokens=0))
        elif i == 10:
            rows.append(_row(sent_ns=i * S // 4, chunk_ns=None, completion_tokens=0))
        elif i == 13:
            rows.append(_row(sent_ns=i * S // 4, status=None, chunk_ns=[5, 9], completion_tokens=2))
        else:
            gaps = [float(g) for g in rng.integers(1, 400, size=int(rng.integers(1, 9)))]
            rows.append(_streamed(i / 4, float(rng.integers(20, 300)), gaps, tokens=2 * len(gaps) + 1))
    table = pa.concat_tables([_table(rows[:9]), _table(rows[9:])])  # two chunks, as two parts read
    whole = (m.itl_ms(table), m.mean_itl_ms_per_row(table), m.throughput(table, 0.5), m.timeline(table, 0.25))
    # the ITLs by their definition: each row's own differences, ok rows only, in row order
    expected = [
        (b - a) / 1e6
        for r in rows if r["status"] == "ok" and r["chunk_ns"]
        for a, b in zip(r["chunk_ns"], r["chunk_ns"][1:], strict=False)
    ]  # fmt: skip
    assert whole[0].tolist() == expected
    mean_itl = [
        (c[-1] - c[0]) / (len(c) - 1) / 1e6 if c is not None and len(c) >= 2 else np.nan
        for c in (r["chunk_ns"] for r in rows)
    ]  # every row's, failed or not
    np.testing.assert_array_equal(whole[1], mean_itl)
    for piece_rows in (1, 2, 3, 5):
        monkeypatch.setattr(m, "PIECE_ROWS", piece_rows)
        assert m.itl_ms(table).tolist() == whole[0].tolist()
        np.testing.assert_array_equal(m.mean_itl_ms_per_row(table), whole[1])
        assert m.throughput(table, 0.5) == whole[2]  # each window's shares summed in one order
        assert m.timeline(table, 0.25) == whole[3]


def test_a_distribution_of_scratch_values_is_the_same_and_reorders_only_them() -> None:
    values = np.random.default_rng(3).exponential(20.0, size=10_001)
    kept, scratch = values.copy(), values.copy()
    assert m.distribution(values) == m.distribution(scratch, scratch=True)
    np.testing.assert_array_equal(values, kept)  # not scratch: left as it was
    assert not np.array_equal(scratch, kept)  # scratch: partitioned in place, not copied
    assert list(m.distribution(values)) == ["count", "mean", "p50", "p90", "p95", "p99", "p99.9", "max"]
