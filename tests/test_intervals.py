"""Verdicts with error bars: 95 % bootstrap intervals over repeats (or sessions), on hand-built
traces whose answers are known: a clear lead keeps its leader and an interval around the true
ratio; a lead smaller than the run-to-run noise is a tie."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from swarm.analysis import intervals
from swarm.analysis import metrics as m
from swarm.analysis.compare import compare
from swarm.analysis.intervals import (
    FIGURES,
    MIN_UNITS,
    Units,
    _drawn_figure,
    _Pooled,
    figure_interval,
    target_intervals,
)
from swarm.analysis.report import build_run_report, load_run
from swarm.emulator.http_server import EmulatorThread
from swarm.launch import execute_run
from swarm.record import RequestIdentity, RequestRecord, Status
from swarm.runtime.specs import RunSpec, TargetSpec
from swarm.trace.manifest import RunManifest, RunStatus
from swarm.trace.sink import ParquetTraceSink
from swarm.workload.arrival import ArrivalSpec
from swarm.workload.workload import MixEntry, WorkloadSpec

SESSIONS, CALLS = 20, 4
MS = 1_000_000


def _record(target: str, repeat: int, session: int, call: int, ttft_ms: float, t0_ns: int) -> RequestRecord:
    sent = t0_ns + (session * CALLS + call) * 50 * MS
    ttft = int(ttft_ms * MS)
    return RequestRecord(
        identity=RequestIdentity(
            run_id="hand", target=target, engine="sglang", session_id=f"0-{session}", node=f"n{call}",
            request_id=f"{target}-{repeat}-{session}-{call}", repeat=repeat,
        ),
        dialect="openai-chat", model="m", stream=True, scheduled_ns=sent, sent_ns=sent, queue_ns=0,
        ttft_ns=ttft, e2e_ns=ttft + 40 * MS, chunk_ns=tuple(ttft + k * 10 * MS for k in range(5)),
        status=Status.OK, max_tokens=5, prompt_tokens=100, completion_tokens=5, cached_tokens=50,
        prompt_tokens_est=100, ideal_cached_tokens_est=90,
    )  # fmt: skip


def hand_run(folder: Path, ttft_of: dict[str, list[float]], noise_ms: float = 1.0) -> Path:
    """Targets a, b, ... each run ``len(ttft_of[t])`` times (repeats, interleaved as ``swarm run
    --repeat`` does): repeat r of target t has TTFTs around ``ttft_of[t][r]``."""
    folder.mkdir(parents=True)
    repeats = len(next(iter(ttft_of.values())))
    manifest = RunManifest(run_id="hand", status=RunStatus.COMPLETE, seed=0, spec_hash="x", repeats=repeats)
    manifest.write(folder)
    rng = np.random.default_rng(7)
    with ParquetTraceSink(folder, writer="w") as sink:
        for r in range(repeats):
            for k, (target, centres) in enumerate(ttft_of.items()):
                t0 = (r * len(ttft_of) + k) * 60_000 * MS  # one repeat of one target a minute
                for s in range(SESSIONS):
                    for c in range(CALLS):
                        sink.write(_record(target, r, s, c, centres[r] + rng.normal(0, noise_ms), t0))
    return folder


def test_a_clear_lead_keeps_its_leader_and_an_interval_around_the_true_ratio(tmp_path: Path) -> None:
    run = load_run(hand_run(tmp_path / "run", {"a": [100, 101, 99], "b": [200, 202, 198]}))
    rows = {r["dimension"]: r for r in compare([run]).as_dict()["rows"]}
    ttft = rows["TTFT p50, all calls"]
    assert ttft["leader"] == "a" and not ttft["tie"]
    interval = ttft["interval"]
    assert interval["units"] == "repeats, paired" and interval["n"] == 3
    assert interval["low"] <= 2.0 <= interval["high"] and interval["low"] > 1.9 and interval["high"] < 2.1
    report = build_run_report(run)
    a = report.targets["a"].intervals["TTFT p50, all calls"]
    assert a.units == "repeats" and a.low < 100 < a.high and a.high - a.low < 5


def test_a_lead_inside_the_run_to_run_noise_is_a_tie(tmp_path: Path) -> None:
    """b is 5 % slower on the pooled median, but a's repeats swing by 40 %: the interval of the
    ratio reaches 1.0, so no leader (the point ratio alone, 1.05, would have named one)."""
    run = load_run(hand_run(tmp_path / "run", {"a": [100, 140, 80], "b": [110, 95, 130]}))
    rows = {r["dimension"]: r for r in compare([run]).as_dict()["rows"]}
    ttft = rows["TTFT p50, all calls"]
    assert ttft["ratio"] > 1.02  # beyond --tie-within: a lead by the point figures alone
    assert ttft["tie"] and ttft["leader"] is None
    assert ttft["interval"]["low"] <= 1.0 <= ttft["interval"]["high"]


def test_one_run_is_resampled_over_its_sessions_and_few_units_give_no_interval(tmp_path: Path) -> None:
    run = load_run(hand_run(tmp_path / "run", {"a": [100], "b": [150]}, noise_ms=20.0))
    units = Units(run.rows_of("a"))
    assert units.kind == "sessions" and len(units) == SESSIONS
    interval = figure_interval(run.rows_of("a"), FIGURES["TTFT p50, all calls"], units)
    assert interval is not None and interval.units == "sessions" and interval.low < 100 < interval.high
    two = run.rows_of("a").filter(pa.compute.is_in(run.rows_of("a")["session_id"], pa.array(["0-1", "0-2"])))
    assert MIN_UNITS > 2 and figure_interval(two, FIGURES["TTFT p50, all calls"]) is None
    flat = run.rows_of("a").drop_columns(["session_id"])
    assert Units(flat).kind == "requests" and len(Units(flat)) == SESSIONS * CALLS


def test_repeats_are_told_apart_in_rates_and_sessions(tmp_path: Path) -> None:
    """Three repeats a minute apart: output tokens/s is over the repeats' own spans (not the
    three minutes), and each repeat's sessions are sessions of their own."""
    run = load_run(hand_run(tmp_path / "run", {"a": [100, 100, 100]}))
    fig = build_run_report(run, intervals=False).targets["a"].figures
    assert fig.agents == 3 * SESSIONS and fig.sessions is not None and fig.sessions.count == 3 * SESSIONS
    one_repeat_s = ((SESSIONS * CALLS - 1) * 50 + 100 + 40) / 1e3
    rate = fig.throughput.output_tokens_per_s
    assert rate is not None and abs(rate - 3 * SESSIONS * CALLS * 5 / (3 * one_repeat_s)) < 1.0
    # a repeat drawn twice by the bootstrap adds its span twice: the rate of identical repeats
    # stays put, and so do the sessions counted by a session's draw
    interval = figure_interval(run.rows_of("a"), FIGURES["output tokens/s"])
    assert interval is not None and interval.low <= rate <= interval.high and interval.high - interval.low < 0.02 * rate
    drawn = Units(run.rows_of("a")).take(np.array([0, 0, 1]))
    assert len(set(drawn["repeat"].to_pylist())) == 3


def test_every_figure_drawn_together_has_the_interval_it_has_alone(tmp_path: Path) -> None:
    """A report draws each resample once for all its figures, on the columns they read: every
    figure is what it is on all the columns, and its interval the one it gets drawn alone."""
    run = load_run(hand_run(tmp_path / "run", {"a": [100, 130, 90]}, noise_ms=20.0))
    rows = run.rows_of("a")
    slim = Units(rows).table
    assert "parent_nodes" in rows.column_names and "parent_nodes" not in slim.column_names
    assert {name: stat(slim) for name, stat in FIGURES.items()} == {name: stat(rows) for name, stat in FIGURES.items()}
    together = target_intervals(rows)
    alone = {name: figure_interval(rows, stat) for name, stat in FIGURES.items()}
    assert together == {name: i for name, i in alone.items() if i is not None}
    assert {"ITL p50", "ITL p99", "output tokens/s"} <= set(together)


def test_cli_compare_prints_the_intervals_and_calls_the_tie(tmp_path: Path) -> None:
    run = hand_run(tmp_path / "run", {"a": [100, 140, 80], "b": [110, 95, 130]})
    swarm = [sys.executable, "-m", "swarm", "compare", str(run)]
    text = subprocess.run([*swarm], capture_output=True, text=True)
    assert text.returncode == 0, text.stderr
    assert "tie (1.0" in text.stdout and "95 %" in text.stdout and "bootstrap over repeats, paired (3)" in text.stdout
    data = json.loads(subprocess.run([*swarm, "--json"], capture_output=True, text=True).stdout)
    ttft = next(r for r in data["rows"] if r["dimension"] == "TTFT p50, all calls")
    assert ttft["tie"] and ttft["interval"]["units"] == "repeats, paired"
    report = subprocess.run([sys.executable, "-m", "swarm", "report", str(run)], capture_output=True, text=True)
    assert report.returncode == 0 and "95 % intervals (bootstrap over repeats (3))" in report.stdout


def _random_rows(rng: np.random.Generator, kind: str, sessions: int = 40) -> pa.Table:
    """Rows of ``sessions`` sessions with what a trace's figures stumble on: failed rows, rows
    with no first token, no end or no cache count, rows of 0, 1 or many chunks, wall-clock
    sends (above 2**53 ns); ``kind``: sessions (one run), repeats (each session in one of four
    repeats) or requests (one row without a session)."""
    n = sessions * 5
    session = rng.integers(0, sessions, n)
    sent = 1_764_000_000_000_000_000 + rng.integers(0, 600_000_000_000, n)
    ttft = rng.integers(1, 4_000_000_000, n)
    chunks = [np.sort(rng.integers(0, 2_000_000_000, int(k))) for k in rng.choice([0, 1, 2, 7, 40], n)]
    prompt = rng.integers(10, 70_000, n)

    def holes(values: np.ndarray, share: float) -> pa.Array:
        return pa.array(values, mask=rng.random(n) < share)

    ids = np.array([f"0-{s}" for s in session], dtype=object)
    if kind == "requests":
        ids[3] = ""
    ids[ids == "0-7"] = "0-7\x00"  # another session, which numpy's strings read as 0-7's
    columns = {
        "status": pa.array(rng.choice(["ok", "ok", "ok", "ok", "timeout", "http_error"], n)),
        "sent_ns": pa.array(sent), "ttft_ns": holes(ttft, 0.1),
        "e2e_ns": holes(ttft + rng.integers(0, 9_000_000_000, n), 0.05),
        "chunk_ns": pa.array([c.tolist() for c in chunks], pa.list_(pa.int64())),
        "prompt_tokens": holes(prompt, 0.05), "completion_tokens": holes(rng.integers(0, 900, n), 0.05),
        "cached_tokens": holes(prompt // rng.integers(1, 5, n), 0.1), "prompt_tokens_est": pa.array(prompt),
        "ideal_cached_tokens_est": pa.array(prompt // 2), "session_id": pa.array(ids.tolist(), pa.string()),
        "repeat": pa.array(session % 4 if kind == "repeats" else np.zeros(n, dtype=np.int64), pa.int32()),
    }  # fmt: skip
    return pa.table(columns)


def test_each_drawn_figure_is_the_figure_of_the_drawn_rows() -> None:
    """A draw's figures come from each unit's own sums and values, found once (a fleet's run
    of 2,000 agents took six minutes to report when every draw copied its rows and its 14
    million inter-token latencies): each is, to the last bit, what the figure gives on the
    drawn rows, for every kind of unit and for draws that pick a unit many times or not at all."""
    rng = np.random.default_rng(11)
    for kind in ("sessions", "repeats", "requests"):
        rows = _random_rows(rng, kind)
        units = Units(rows)
        assert units.kind == kind
        for name, stat in FIGURES.items():
            draw = _drawn_figure(units, stat)
            for size in (len(units), 3, 1):
                for _ in range(8):
                    picks = rng.integers(0, len(units), len(units))
                    picks[: len(units) - size] = picks[-1]  # the same unit many times
                    assert draw(picks) == stat(units.take(picks)), (kind, name, picks)


@pytest.mark.parametrize("backwards", [False, True], ids=["packed", "a chunk time going back"])
def test_pooled_itls_are_the_itls_sorted_however_they_are_held(
    backwards: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ITLs are pooled from one int64 each (ns and unit packed, sorted in place, a few rows at
    a time); where they cannot be (an ITL below 0), from the milliseconds: either way, every
    drawn percentile is that of the milliseconds sorted with their units."""
    monkeypatch.setattr(intervals, "_PACK_ROWS", 7)  # many packs of rows
    rng = np.random.default_rng(3)
    rows = _random_rows(rng, "sessions")
    if backwards:
        chunks = rows["chunk_ns"].to_pylist()
        at = next(i for i, c in enumerate(chunks) if len(c) > 2 and rows["status"][i].as_py() == "ok")
        chunks[at] = chunks[at][::-1]
        column = pa.array(chunks, pa.list_(pa.int64()))
        rows = rows.set_column(rows.schema.get_field_index("chunk_ns"), "chunk_ns", column)
    units = Units(rows)
    held = units.pooled(m.itl_ms)
    assert (held.scale == 1e6) is not backwards  # which way it was held
    plain = _Pooled.sorting(m.itl_ms(rows), np.repeat(units.row_units(), m.itl_counts(rows)), len(units))
    for _ in range(30):
        counts = np.bincount(rng.integers(0, len(units), len(units)), minlength=len(units))
        for q in (0, 2.5, 50, 99, 100):
            assert held.percentile(counts, q) == plain.percentile(counts, q)


def test_a_percentile_of_units_drawn_is_numpys_over_their_values_laid_end_to_end() -> None:
    rng = np.random.default_rng(5)
    for n_units, values_each in ((3, 2_000), (300, 40), (50, 1)):
        lengths = rng.integers(0, values_each * 2, n_units)
        values = np.round(rng.lognormal(3, 1, int(lengths.sum())), 1)  # ties, as ms rounded are
        units_of = np.repeat(np.arange(n_units), lengths)
        pooled = _Pooled.sorting(values, units_of, n_units)
        for _ in range(20):
            counts = np.bincount(rng.integers(0, n_units, n_units), minlength=n_units)
            drawn = [values[units_of == u] for u in range(n_units) for _ in range(counts[u])]
            laid = np.concatenate(drawn or [[]])
            for q in (0, 2.5, 50, 97.5, 99, 100):
                expected = float(np.percentile(laid, q)) if laid.size else None
                assert pooled.percentile(counts, q) == expected, (n_units, q)


def test_run_repeat_runs_each_target_again_on_an_emptied_cache(
    tmp_path: Path, emulator: Callable[..., EmulatorThread]
) -> None:
    """`--repeat 3` against two emulators: each target three times, interleaved, its cache
    emptied between (a repeat reuses no more than the first did); the rows say their repeat, and
    compare gives every ratio an interval over the repeats, paired."""
    emus = [emulator(engine="sglang", timing="zero"), emulator(engine="trtllm", timing="zero")]
    spec = RunSpec(
        workload=WorkloadSpec(
            agents=6, mix=[MixEntry(profile="math_reasoner", topology="chain")],
            arrival=ArrivalSpec(process="all_at_once", rate=None),
        ),
        targets=[TargetSpec(name=e.config.engine, url=e.url, engine=e.config.engine) for e in emus],
        output_dir=str(tmp_path), executor="inprocess", repeats=3,
    )  # fmt: skip
    run_dir = str(execute_run(spec).run_dir)
    run = load_run(run_dir)
    assert run.manifest.repeats == 3
    for t in run.manifest.targets:
        assert t.outcome == "complete" and t.sessions_planned == t.sessions_finished == 18
    for name in ("sglang", "trtllm"):
        rows = run.rows_of(name).to_pylist()
        by_repeat = {r: [x for x in rows if x["repeat"] == r] for r in range(3)}
        assert all(len(v) == len(rows) // 3 for v in by_repeat.values())
        cached = [sum(x["cached_tokens"] or 0 for x in by_repeat[r]) for r in range(3)]
        assert cached[1] == cached[2] == cached[0] > 0  # no repeat starts warm
    rows = {r["dimension"]: r for r in compare([run]).as_dict()["rows"]}
    assert rows["cache hit ratio"]["interval"]["units"] == "repeats, paired"
