"""Percentiles of values read a piece at a time (``analysis/order_stats.py``) are numpy's over
the values laid end to end, to the last bit, however the values are cut; and the closing
summary, which reads a run's chunk times from its files that way, gives the figures the
report gives from the whole table."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.synthetic import synthetic_record
from swarm.analysis import order_stats
from swarm.analysis.figures import rows_of, target_figures
from swarm.analysis.metrics import PERCENTILES, distribution, percentile_key
from swarm.analysis.order_stats import ns_distribution
from swarm.analysis.report import build_run_report, load_run
from swarm.analysis.summary import closing_summary, summarize_run
from swarm.record import RequestRecord
from swarm.trace.manifest import RunManifest, RunStatus
from swarm.trace.reader import read_requests, without_warmups
from swarm.trace.sink import ParquetTraceSink


def _cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    steps = np.array([6_100_000, 7_350_000, 7_350_000, 9_800_000, 46_630_000])
    return {
        "inter-token gaps with ties": rng.choice(steps, 3000) + rng.integers(0, 3, 3000),
        "one bucket, many values": 7_000_000 + rng.integers(0, 20_000, 4000),
        "all the same": np.full(1500, 7_350_000),
        "below and above zero": rng.integers(-(2**40), 2**40, 2500),
        "a few below zero": rng.permutation(np.r_[rng.integers(0, 10**8, 3000), -rng.integers(1, 10**6, 12)]),
        "past 2**53 (ints that share a float)": 2**60 + rng.integers(0, 4096, 800),
        "one": np.array([123_456_789]),
        "two": np.array([5, 3]),
    }


def _pieces(values: np.ndarray, seed: int, reads: list[int]) -> order_stats.NsPieces:
    """``values`` cut at random places (empty pieces among them), counting each read."""
    cuts = np.sort(np.random.default_rng(seed).integers(0, values.size + 1, 40))

    def read() -> Iterator[np.ndarray]:
        reads.append(1)
        yield from np.split(values, cuts)

    return read


@pytest.mark.parametrize("held", [order_stats.HELD_VALUES, 7], ids=["held", "bucketed"])
@pytest.mark.parametrize("case", list(_cases()))
def test_percentiles_read_in_pieces_are_numpys_over_the_values_laid_out(
    monkeypatch: pytest.MonkeyPatch, held: int, case: str
) -> None:
    monkeypatch.setattr(order_stats, "HELD_VALUES", held)  # 7: the buckets, and their merges
    values = _cases()[case].astype(np.int64)
    reads: list[int] = []
    got = ns_distribution(_pieces(values, len(case), reads))
    want = distribution(values.astype(np.float64) / 1e6)
    for key in ["count", *(percentile_key(q) for q in PERCENTILES), "max"]:
        assert got[key] == want[key], key
    exact = Fraction(sum(int(v) for v in values), values.size * 1_000_000)
    assert got["mean"] == float(exact)  # the exact sum's mean, rounded once
    assert len(reads) == (1 if values.size <= held else 2)


def test_no_values_give_no_figures() -> None:
    got = ns_distribution(lambda: iter([np.zeros(0, dtype=np.int64)]))
    assert got == distribution(np.zeros(0))


def _record(i: int, target: str, gap_ns: int, warmup: bool = False) -> RequestRecord:
    record = synthetic_record(i, chunks=5 + i % 7)
    if record.chunk_ns:  # each target, and the warm-ups, with gaps of their own
        first = record.chunk_ns[0]
        chunk_ns = tuple(first + k * gap_ns + i % 5 for k in range(len(record.chunk_ns)))
        record = dataclasses.replace(record, chunk_ns=chunk_ns)
    return record.with_identity(target=target, warmup=warmup)


def _run_with_warmups(run_dir: Path, own_parts: bool = False) -> None:
    """Two targets with gaps of their own, warm-ups among them, in several parts: each
    target's rows in parts of their own (as a run writes them), or both in the same parts."""
    RunManifest(run_id="r", status=RunStatus.COMPLETE, seed=0, spec_hash="x").write(run_dir)
    with (
        ParquetTraceSink(run_dir, writer="a", batch_rows=16, part_rows=40) as sink_a,
        ParquetTraceSink(run_dir, writer="b", batch_rows=16, part_rows=40) as sink_b,
    ):
        for i in range(150):
            target, gap = ("a", 7_000_000) if i % 3 else ("b", 19_000_000)
            sink = sink_b if own_parts and target == "b" else sink_a
            sink.write(_record(i, target, gap, warmup=i % 10 == 0))
            if i % 10 == 0:
                sink_a.write(_record(i, "a", 90_000_000, warmup=True))


@pytest.mark.parametrize("own_parts", [True, False], ids=["a target's own parts", "shared parts"])
def test_the_closing_summary_reads_chunks_from_the_files_as_the_report_reads_its_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_parts: bool
) -> None:
    monkeypatch.setattr(order_stats, "HELD_VALUES", 50)  # the buckets' two passes over the files
    _run_with_warmups(tmp_path, own_parts)
    table, warmups = without_warmups(read_requests(tmp_path))
    assert warmups
    summary = summarize_run(tmp_path)
    assert set(summary) == {"a", "b"}
    for target, got in summary.items():
        want = closing_summary(target_figures(rows_of(table, target)), "sglang")
        assert got == want
    assert summary["a"]["itl_p50_ms"] != summary["b"]["itl_p50_ms"]


def test_the_report_reads_a_run_less_its_warm_ups_and_counts_them(tmp_path: Path) -> None:
    _run_with_warmups(tmp_path)
    table, warmups = without_warmups(read_requests(tmp_path))
    run = load_run(tmp_path)
    assert run.warmup_rows == warmups > 0
    assert run.requests.num_rows == table.num_rows
    assert run.requests["sent_ns"].to_pylist() == table["sent_ns"].to_pylist()  # in order
    report = build_run_report(run, intervals=False)
    assert report.targets["a"].figures == target_figures(rows_of(table, "a"))


def _spoil(part: Path, column: str) -> None:
    """Overwrite the pages of one column of a part (the rest of it still reads)."""
    meta = pq.ParquetFile(part).metadata
    at = next(i for i in range(meta.num_columns) if meta.schema.column(i).path.split(".")[0] == column)
    data = bytearray(part.read_bytes())
    for g in range(meta.num_row_groups):
        chunk = meta.row_group(g).column(at)
        start = chunk.data_page_offset
        data[start : start + chunk.total_compressed_size] = b"\xab" * chunk.total_compressed_size
    part.write_bytes(bytes(data))


def test_the_warm_ups_of_a_part_that_cannot_be_read_are_not_counted_as_left_out(tmp_path: Path) -> None:
    _run_with_warmups(tmp_path, own_parts=True)
    b_part = sorted((tmp_path / "requests").glob("part-b-*.parquet"))[0]
    b_warmups = sum(pq.read_table(b_part, columns=["warmup"])["warmup"].to_pylist())
    whole = load_run(tmp_path).warmup_rows
    _spoil(b_part, "chunk_ns")
    run = load_run(tmp_path)
    assert [Path(b.path).name for b in run.bad_parts] == [b_part.name]
    assert b_warmups and run.warmup_rows == whole - b_warmups
