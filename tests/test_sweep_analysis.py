"""The analysis core of `swarm sweep` (issue 16) on hand-built traces and point lists whose
answers are worked out by hand in the comments: the steady window, per-point figures, validity,
Pareto fronts, capacity at SLO, the eviction cliff and crossovers. No clocks are read."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from swarm.analysis import metrics as m
from swarm.sweep.curves import (
    Goal,
    SloBound,
    SweepPoint,
    capacity_at_slo,
    capacity_ratio,
    crossovers,
    eviction_cliff,
    fewest_at_slo,
    pareto_front,
)
from swarm.sweep.point_figures import (
    fixed_window,
    point_figures,
    point_validity,
    pooled_figures,
    repeat_tables,
    steady_window,
    tasks_in,
    whole_run_window,
)
from swarm.sweep.point_intervals import point_intervals
from swarm.trace.schema import TRACE_SCHEMA

MS = 1_000_000
S = 1_000_000_000
#: Wall-clock nanoseconds of today: above 2**53, where float64 would lose precision.
WALL = 1_795_987_208_128_635_443


def _row(**fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": "r", "target": "a", "engine": "sglang", "worker": 0, "agent_id": 0, "profile": "p",
        "topology": "t", "session_id": "", "node": "n", "parent_nodes": [], "depth": 0, "branch": 0,
        "role": "expand", "system_prompt_id": 0, "request_id": "x", "attempt": 0, "dialect": "openai-chat",
        "model": "m", "stream": True, "scheduled_ns": None, "sent_ns": 0, "queue_ns": 0, "ttft_ns": None,
        "e2e_ns": None, "chunk_ns": [], "max_tokens": None, "prompt_tokens": None,
        "completion_tokens": None, "cached_tokens": None, "prompt_tokens_est": None,
        "ideal_cached_tokens_est": None, "block_hashes": [], "status": "ok", "http_status": 200,
        "error": None, "finish_reason": None, "prompt_parts": None, "prompt_roles": None,
        "output_text": None, "slot_wait_ns": 0,
    }  # fmt: skip
    row.update(fields)
    if row["scheduled_ns"] is None:
        row["scheduled_ns"] = row["sent_ns"]
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


# --- the steady window -------------------------------------------------------------------------


def _ramp_plateau_drain() -> pa.Table:
    """4 streams of back-to-back 2 s requests; stream k starts at k s and sends at k, k+2, ...,
    k+18 (10 requests), so it is busy on [k, k+20]. In flight: [0,1) 1, [1,2) 2, [2,3) 3,
    [3,20) 4, [20,21) 3, [21,22) 2, [22,23) 1."""
    return _table(
        [_row(sent_ns=(k + 2 * j) * S, e2e_ns=2 * S, session_id=f"s{k}") for k in range(4) for j in range(10)]
    )


def test_the_steady_window_drops_the_ramp_and_the_drain() -> None:
    table = _ramp_plateau_drain()
    w = steady_window(table, fraction=0.8)
    # time at level 4 is 17 s of 23 s (> half), so the time-weighted median R = 4;
    # θ = max(0.8 × 4, 1) = 3.2: only level 4 qualifies, from 3 s to 20 s
    assert w.level_median == 4 and w.threshold == pytest.approx(3.2)
    assert (w.start_ns, w.end_ns) == (WALL + 3 * S, WALL + 20 * S)
    assert w.duration_s == 17
    # sends in [3, 20]: stream 0 at 4..18 (8), stream 1 at 3..19 (9), stream 2 at 4..20 (9),
    # stream 3 at 3..19 (9; its 21 is out) = 35
    assert w.requests == 35
    # a lower share keeps more of the ramp: θ = max(0.5 × 4, 1) = 2, level >= 2 on [1, 22];
    # every send but stream 0's at 0 s: 40 - 1 = 39
    w = steady_window(table, fraction=0.5)
    assert (w.start_ns, w.end_ns, w.requests) == (WALL + 1 * S, WALL + 22 * S, 39)


def test_a_dip_inside_the_steady_state_stays_in_the_window() -> None:
    # an open loop wanders: A [0,10], B [0,4], C [6,10] -> level 2 on [0,4), 1 on [4,6), 2 on [6,10)
    table = _table(
        [
            _row(sent_ns=0, e2e_ns=10 * S),
            _row(sent_ns=0, e2e_ns=4 * S),
            _row(sent_ns=6 * S, e2e_ns=4 * S),
        ]
    )
    w = steady_window(table)
    # level 1 for 2 s, level 2 for 8 s: R = 2, θ = 1.6; first reached at 0, last left at 10
    assert w.level_median == 2
    assert (w.start_ns - WALL, w.end_ns - WALL, w.requests) == (0, 10 * S, 3)


def test_steady_window_rejects_a_share_outside_0_1() -> None:
    with pytest.raises(ValueError, match="fraction"):
        steady_window(_ramp_plateau_drain(), fraction=1.5)


def test_whole_run_figures_are_the_same_function_over_the_whole_run() -> None:
    table = _ramp_plateau_drain()
    w = whole_run_window(table)
    assert (w.start_ns - WALL, w.end_ns - WALL, w.requests) == (0, 23 * S, 40)
    fig = point_figures(table, w)
    # 40 requests over 23 s, as metrics.throughput says
    assert fig.requests_per_s == pytest.approx(40 / 23) == m.throughput(table)["requests_per_s"]


# --- per-point figures -------------------------------------------------------------------------


def test_rates_interactivity_errors_and_goodput_in_a_window() -> None:
    table = _table(
        [
            _streamed(1, 100, [20, 20, 20, 20], tokens=5),  # e2e 180: TPOT 80/4 = 20 ms -> 50 tok/s
            _streamed(2, 200, [10] * 9, tokens=10),  # e2e 290: TPOT 90/9 = 10 ms -> 100 tok/s
            _streamed(3, 50, [40, 40], tokens=3),  # e2e 130: TPOT 80/2 = 40 ms -> 25 tok/s
            _row(sent_ns=4 * S, status="timeout"),
            _streamed(12, 100, [10], tokens=2),  # sent after the window
        ]
    )
    fig = point_figures(table, fixed_window(table, WALL, WALL + 10 * S), slo=m.SLO(ttft_ms=150))
    assert (fig.requests, fig.ok) == (4, 3)
    assert fig.requests_per_s == pytest.approx(4 / 10)
    assert fig.output_tokens_per_s == pytest.approx((5 + 10 + 3) / 10)
    assert fig.interactivity_tokens_per_s == pytest.approx(50)  # median of 50, 100, 25
    assert fig.ttft_ms.p50 == pytest.approx(100) and fig.tpot_ms.p50 == pytest.approx(20)
    assert fig.error_rate == pytest.approx(1 / 4)
    # TTFT <= 150 ms: rows at 1 s (100 ms) and 3 s (50 ms); 2 of 4, 0.2/s, (5 + 3) / 10 tokens/s
    assert fig.goodput is not None
    assert (fig.goodput.good, fig.goodput.good_fraction) == (2, 0.5)
    assert fig.goodput.per_s == pytest.approx(0.2) and fig.goodput.tokens_per_s == pytest.approx(0.8)
    flat = fig.flat()
    assert flat["ttft_ms.p99"] == fig.ttft_ms.p99 and flat["goodput.per_s"] == pytest.approx(0.2)
    assert fig.as_dict()["window"]["duration_s"] == 10


def _session(name: str, scheduled_s: int, end_s: int, sent_s: int | None = None, **last: Any) -> list[dict]:
    """A two-request session: its first scheduled at ``scheduled_s`` (sent at ``sent_s``), its
    last request ending at ``end_s``."""
    first = _row(session_id=name, scheduled_ns=scheduled_s * S, sent_ns=(sent_s or scheduled_s) * S, e2e_ns=S)
    return [first, _row(session_id=name, sent_ns=(end_s - 10) * S, e2e_ns=10 * S, **last)]


def test_tasks_per_hour_and_task_completion_time() -> None:
    table = _table(
        _session("A", 0, 50)  # completes before the window
        + _session("B", 20, 400)  # starts before, completes inside: 380 s
        + _session("C", 150, 1000)  # 850 s
        + _session("D", 900, 1500, sent_s=905)  # from its first *scheduled*: 600 s
        + _session("E", 1000, 2500)  # completes after the window
        + _session("F", 500, 1200, status="cancelled")  # cut: not completed
        + [_row(sent_ns=700 * S, e2e_ns=S)]  # no session
    )
    window = fixed_window(table, WALL + 100 * S, WALL + 1900 * S)  # 1800 s = half an hour
    tasks = tasks_in(table, window)
    # B, C, D complete inside: 3 tasks / 0.5 h = 6 per hour
    assert tasks.completed == 3 and tasks.per_hour == pytest.approx(6)
    # completion times 380, 600, 850 s; p90 at rank 0.9 × 2 = 1.8: 600 + 0.8 × 250 = 800 s;
    # p99 at rank 1.98: 600 + 0.98 × 250 = 845 s
    d = tasks.completion_ms
    assert (d.p50, d.p90, d.p99) == (pytest.approx(600_000), pytest.approx(800_000), pytest.approx(845_000))
    assert point_figures(table, window).tasks == tasks


def test_misses_split_into_compulsory_and_lost() -> None:
    def req(est: int, ideal: int, prompt: int, cached: int | None, **f: Any) -> dict[str, Any]:
        return _row(
            e2e_ns=MS, prompt_tokens_est=est, ideal_cached_tokens_est=ideal, prompt_tokens=prompt,
            cached_tokens=cached, **f,
        )  # fmt: skip

    table = _table(
        [
            req(1000, 0, 1000, 0),  # compulsory 1000, lost 0
            req(1000, 800, 1000, 800),  # compulsory 200, lost 0
            req(1000, 900, 1000, 100),  # compulsory 100, lost 900 - 100 = 800
            req(500, 400, 500, 450),  # compulsory 100, lost max(400 - 450, 0) = 0
            req(1000, 0, 1000, 0, status="timeout"),  # not ok: left out
            req(1000, 500, 1000, None),  # no cached count reported: left out
        ]
    )
    fig = point_figures(table, whole_run_window(table))
    mi = fig.misses
    assert mi.rows == 4
    assert (mi.compulsory_tokens, mi.lost_tokens) == (1400, 800)
    assert mi.compulsory_share == pytest.approx(1400 / 2200) and mi.lost_share == pytest.approx(800 / 2200)
    # the engine's own misses: 1000 + 200 + 900 + 50
    assert mi.realised_tokens == 2150
    # realised hit 1350 / 3500, ideal 2100 / 3500, their ratio 1350 / 2100
    assert fig.hit_ratio == pytest.approx(1350 / 3500) and fig.ideal_hit_ratio == pytest.approx(0.6)
    assert fig.hit_vs_ideal == pytest.approx(1350 / 2100)


# --- a point of several repeats (swarm sweep --repeat N) ----------------------------------------


def _repeated_point(repeats: int) -> pa.Table:
    """``repeats`` runs of ``_ramp_plateau_drain``'s shape, 100 s apart; in repeat r every request
    has a TTFT of 10 × (r + 1) ms and 2 output tokens, and every session completes."""
    return _table(
        [
            _streamed(100 * r + k + 2 * j, 10 * (r + 1), [2000 - 10 * (r + 1)], 2, session_id=f"s{k}", repeat=r)
            for r in range(repeats)
            for k in range(4)
            for j in range(10)
        ]
    )


def test_a_point_of_repeats_pools_each_repeats_own_window_and_gives_intervals_over_them() -> None:
    parts = [(t, steady_window(t)) for t in repeat_tables(_repeated_point(3))]
    assert [t.num_rows for t, _ in parts] == [40, 40, 40]
    # each repeat's window is its own plateau, [3 s, 20 s] after its start: 17 s
    assert [(w.start_ns - WALL, w.end_ns - WALL) for _, w in parts] == [
        ((100 * r + 3) * S, (100 * r + 20) * S) for r in range(3)
    ]
    alone = [point_figures(t, w) for t, w in parts]
    pooled = pooled_figures(parts)
    assert pooled.window.duration_s == pytest.approx(3 * 17)  # lengths summed, not first to last
    assert pooled.requests == sum(f.requests for f in alone)
    assert pooled.requests_per_s == pytest.approx(pooled.requests / 51)
    assert pooled.output_tokens_per_s == pytest.approx(2 * pooled.requests / 51)
    assert pooled.tasks.completed == sum(f.tasks.completed for f in alone)
    assert pooled.ttft_ms.p50 == pytest.approx(20)  # over the pooled rows: 10, 20 and 30 ms alike
    # the bootstrap over 3 repeats: a draw of one repeat three times has chance 1/27 > 2.5 %
    # each way, so the 95 % interval of TTFT p50 runs from the fastest repeat to the slowest
    intervals = point_intervals(parts, ["ttft_ms.p50", "requests_per_s", "no.such.figure"])
    ttft = intervals["ttft_ms.p50"]
    assert (ttft.low, ttft.high, ttft.units, ttft.n) == (pytest.approx(10), pytest.approx(30), "repeats", 3)
    rate = intervals["requests_per_s"]  # the repeats send alike: no spread
    assert rate.low == pytest.approx(pooled.requests_per_s) == pytest.approx(rate.high)
    assert "no.such.figure" not in intervals
    # two repeats are pooled alike but give no interval (a bootstrap of two says nothing)
    two = [(t, steady_window(t)) for t in repeat_tables(_repeated_point(2))]
    assert pooled_figures(two).window.duration_s == pytest.approx(34)
    assert point_intervals(two, ["ttft_ms.p50"]) == {}
    # one run is its own single part: the figures of point_figures
    (one,) = repeat_tables(_repeated_point(1))
    assert pooled_figures([(one, steady_window(one))]) == point_figures(one, steady_window(one))


# --- validity ----------------------------------------------------------------------------------


def _queued(n: int, queue_ms: float, slot_wait_ms: float) -> list[dict[str, Any]]:
    return [
        _row(sent_ns=i * MS, e2e_ns=MS, queue_ns=int(queue_ms * MS), slot_wait_ns=int(slot_wait_ms * MS))
        for i in range(n)
    ]


def test_a_point_whose_generator_fell_behind_is_invalid_with_its_reason() -> None:
    # 98 sends waited 30 ms for a slot (the load asked for: lag 0), 2 were sent 50 ms late;
    # lag p99 at rank 0.99 × 99 = 98.01, between the two 50s: 50 ms > LATE_NS (10 ms)
    table = _table(_queued(98, 30, 30) + _queued(2, 50, 0))
    fig = point_figures(table, whole_run_window(table))
    v = point_validity(fig, max_error_rate=0.05)
    assert not v.valid
    assert v.reason == "the generator fell behind its schedule: dispatch lag p99 50 ms > 10 ms"
    # one late send in a hundred is noise: p99 = 0 + 0.01 × 50 = 0.5 ms
    table = _table(_queued(99, 30, 30) + _queued(1, 50, 0))
    assert point_validity(point_figures(table, whole_run_window(table)), max_error_rate=0.05).valid


def test_a_point_whose_client_read_late_is_flagged_and_keeps_its_cache_figures() -> None:
    """The client's own lag behind the kernel's stamps (``chunk_lag_ns``) above 5 % of TTFT p50
    makes a point late-only: its timing is flagged, its cache figures still count."""

    def streams(lag_ms: float) -> pa.Table:
        return _table(
            [
                _streamed(i, 100, [10, 10], 3, clock="kernel", chunk_lag_ns=[int(lag_ms * MS)] * 3)
                for i in range(50)
            ]
        )

    fig = point_figures(streams(20), whole_run_window(streams(20)))
    assert fig.client_lag_ms.p99 == pytest.approx(20)
    v = point_validity(fig, max_error_rate=0.05)
    assert not v.valid and v.late_only
    assert v.reason is not None and "20.0 ms behind the kernel's receive stamps at p99, 20% of TTFT p50" in v.reason
    # 4 ms is under 5 % of a 100 ms TTFT; and a trace timed in user space has no lag to judge
    assert point_validity(point_figures(streams(4), whole_run_window(streams(4))), max_error_rate=0.05).valid
    user = _table([_streamed(i, 100, [10, 10], 3, clock="user", chunk_lag_ns=[]) for i in range(50)])
    fig = point_figures(user, whole_run_window(user))
    assert fig.client_lag_ms.count == 0 and point_validity(fig, max_error_rate=0.05).valid


def test_a_point_with_too_many_errors_is_invalid() -> None:
    table = _table(_queued(8, 0, 0) + [_row(sent_ns=9 * MS, status="timeout")] * 2)
    fig = point_figures(table, whole_run_window(table))
    v = point_validity(fig, max_error_rate=0.1)  # 2 / 10 = 20 % > 10 %
    assert not v.valid and v.reason == "error share 20.0% above the bound 10.0%"
    assert point_validity(fig, max_error_rate=0.25).valid
    point = SweepPoint.of(8, fig, v)
    assert not point.valid and point.reason == v.reason and point.value("error_rate") == pytest.approx(0.2)


# --- curves and verdicts -----------------------------------------------------------------------


def _points(figure: str, values: dict[float, float], invalid: tuple[float, ...] = ()) -> list[SweepPoint]:
    return [SweepPoint(load, {figure: v}, valid=load not in invalid) for load, v in values.items()]


def test_pareto_front_drops_dominated_and_invalid_points() -> None:
    tok, inter = "output_tokens_per_s", "interactivity_tokens_per_s"
    data = {1: (100, 50), 2: (180, 45), 4: (170, 30), 8: (300, 20), 16: (250, 10), 32: (400, 40)}
    points = [SweepPoint(load, {tok: t, inter: i}, valid=load != 32) for load, (t, i) in data.items()]
    front = pareto_front(points, Goal(tok, "higher"), Goal(inter, "higher"))
    # 4 (170, 30) is dominated by 2 (180, 45); 16 (250, 10) by 8 (300, 20); 32 would dominate 8
    # (400 > 300, 40 > 20) but is invalid, so 8 stays
    assert [p.load for p in front] == [1, 2, 8]

    done, took = "tasks.per_hour", "tasks.completion_ms.p50"
    data = {1: (10, 100), 2: (20, 120), 4: (15, 130), 8: (30, 300), 16: (30, 300)}
    points = [SweepPoint(load, {done: t, took: c}) for load, (t, c) in data.items()]
    front = pareto_front(points, Goal(done, "higher"), Goal(took, "lower"))
    # 4 (15/h, 130 ms) is dominated by 2 (20/h, 120 ms); 8 and 16 are equal: neither dominates
    assert [p.load for p in front] == [1, 2, 8, 16]


def _capacity_points() -> list[SweepPoint]:
    ttft = {10: 100.0, 20: 150.0, 30: 1000.0, 40: 300.0, 80: 600.0}
    good = {10: 1.0, 20: 0.95, 30: 0.1, 40: 0.85, 80: 0.5}
    return [
        SweepPoint(load, {"ttft_ms.p99": ttft[load], "goodput.good_fraction": good[load]}, valid=load != 30)
        for load in ttft
    ]


def test_capacity_at_slo_interpolates_on_the_failing_figure() -> None:
    points = _capacity_points()  # load 30 is invalid: it would fail both bounds, but is left out
    ttft, good = SloBound("ttft_ms.p99", 200, "lower"), SloBound("goodput.good_fraction", 0.9, "higher")
    cap = capacity_at_slo(points, [ttft, good])
    # 20 passes both, 40 fails both. TTFT: 20 + (200 - 150) / (300 - 150) × 20 = 26.67;
    # good fraction: 20 + (0.9 - 0.95) / (0.85 - 0.95) × 20 = 30. The lower one wins.
    assert cap.load == pytest.approx(20 + 50 / 150 * 20)
    assert cap.limiting == "ttft_ms.p99 <= 200" and cap.between == (20, 40) and not cap.at_least
    assert capacity_at_slo(points, [good]).load == pytest.approx(30)


def test_capacity_when_nothing_fails_or_the_first_point_fails() -> None:
    points = _capacity_points()
    top = capacity_at_slo(points, [SloBound("ttft_ms.p99", 1000, "lower")])
    assert top.load == 80 and top.at_least
    assert top.describe() == "at least the top load 80: no point failed an SLO"
    low = capacity_at_slo(points, [SloBound("ttft_ms.p99", 50, "lower")])
    assert low.load is None and low.describe() == "below the lowest load: it already fails ttft_ms.p99 <= 50"
    # a point without the figure fails the bound
    assert capacity_at_slo(points, [SloBound("e2e_ms.p99", 1e9)]).load is None


def test_the_fewest_replicas_meeting_the_slos_is_found_from_below() -> None:
    """A knob that adds capacity (a fleet's replicas): TTFT falls as replicas grow. 2 fails,
    4 meets: the crossing of 200 ms on the line from 2 (500) to 4 (150) is 2 + 300 / 350 × 2
    = 3.71, rounded up to 4 replicas (3.71 kept without ``whole``); an invalid point is left
    out; every point meeting gives at most the lowest; none meeting names the bound."""
    ttft = {1: 2000.0, 2: 500.0, 3: 90.0, 4: 150.0, 8: 100.0}
    points = [SweepPoint(load, {"ttft_ms.p99": v}, valid=load != 3) for load, v in ttft.items()]
    bound = SloBound("ttft_ms.p99", 200, "lower")
    fewest = fewest_at_slo(points, [bound])
    assert fewest.load == 4 and fewest.between == (2, 4) and fewest.limiting == "ttft_ms.p99 <= 200"
    assert fewest.describe() == "4 (limited by ttft_ms.p99 <= 200, between 2 and 4 tested)"
    assert fewest_at_slo(points, [bound], whole=False).load == pytest.approx(2 + 300 / 350 * 2)
    easy = fewest_at_slo(points, [SloBound("ttft_ms.p99", 5000, "lower")])
    assert easy.load == 1 and easy.at_most and "at most the lowest load 1" in easy.describe()
    hard = fewest_at_slo(points, [SloBound("ttft_ms.p99", 50, "lower")])
    assert hard.load is None and hard.describe() == "above the top load: it still fails ttft_ms.p99 <= 50"


def test_a_capacity_ratio_says_more_capacity_either_way() -> None:
    """Capacities at SLO divide as they are; the fewest replicas divide the other way (half the
    replicas is twice the capacity); kinds that differ, or a missing value, give none."""
    most = lambda load: {"load": load, "fewest": False}  # noqa: E731
    fewest = lambda load: {"load": load, "fewest": True}  # noqa: E731
    assert capacity_ratio(most(10), most(25)) == 2.5
    assert capacity_ratio(fewest(4), fewest(2)) == 2.0
    assert capacity_ratio(most(10), fewest(2)) is None and capacity_ratio(fewest(None), fewest(2)) is None


def test_eviction_cliff_from_the_lowest_valid_load() -> None:
    # load 5 is invalid; the base is load 10's 0.9, the threshold 0.5 × 0.9 = 0.45;
    # first below: 80 (0.2), after 40 (0.6): 40 + (0.45 - 0.6) / (0.2 - 0.6) × 40 = 55
    points = _points("hit_vs_ideal", {5: 0.1, 10: 0.9, 20: 0.85, 40: 0.6, 80: 0.2}, invalid=(5,))
    cliff = eviction_cliff(points)
    assert cliff is not None
    assert cliff.load == pytest.approx(55) and cliff.threshold == pytest.approx(0.45)
    assert cliff.base == 0.9 and cliff.between == (40, 80)
    # 0.2 × 0.9 = 0.18: nothing falls below it
    assert eviction_cliff(points, fraction=0.2) is None


def test_crossover_of_goodput_and_its_absence() -> None:
    a = _points("goodput.per_s", {10: 100, 20: 180, 40: 250, 80: 260})
    b = _points("goodput.per_s", {10: 120, 20: 190, 40: 230, 80: 300})
    # d = a - b: -20, -10, +20, -40. First crossing between 20 and 40:
    # 20 + (-10) / (-10 - 20) × 20 = 26.67 (a overtakes b); second between 40 and 80:
    # 40 + 20 / (20 - (-40)) × 40 = 53.33 (b takes it back)
    first, second = crossovers("sglang", a, "trtllm", b)
    assert first.load == pytest.approx(20 + 10 / 30 * 20) and first.between == (20, 40)
    assert (first.leader_before, first.leader_after) == ("trtllm", "sglang")
    assert second.load == pytest.approx(40 + 20 / 60 * 40)
    assert (second.leader_before, second.leader_after) == ("sglang", "trtllm")
    # a leads throughout: no crossover
    assert (
        crossovers(
            "a", _points("goodput.per_s", {10: 5, 20: 6}), "b", _points("goodput.per_s", {10: 1, 20: 2})
        )
        == []
    )
    # a tie at 20 between b's lead and a's: the crossover is at the tie
    tie = crossovers(
        "a",
        _points("goodput.per_s", {10: 1, 20: 2, 40: 5}),
        "b",
        _points("goodput.per_s", {10: 2, 20: 2, 40: 3}),
    )
    assert [c.load for c in tie] == [20]


def test_a_point_without_requests_is_invalid() -> None:
    table = TRACE_SCHEMA.empty_table()
    window = steady_window(table)
    assert (window.start_ns, window.end_ns, window.requests) == (0, 0, 0)
    v = point_validity(point_figures(table, window), max_error_rate=0.05)
    assert not v.valid and v.reason == "no request was sent in the steady window"


def test_the_cliff_keeps_points_late_only_and_drops_points_with_errors() -> None:
    """hit/ideal 1.0, 0.9, 0.3 at loads 2, 4, 8. The point at 8 is invalid because the
    generator fell behind: its hit ratio is the engine's count all the same, so the cliff (below
    0.5) lies between 4 and 8: 4 + (0.9 - 0.5) / (0.9 - 0.3) x 4 = 6.67. Invalid for errors, it
    is left out, and no cliff is found."""
    late = [
        SweepPoint(2, {"hit_vs_ideal": 1.0}),
        SweepPoint(4, {"hit_vs_ideal": 0.9}),
        SweepPoint(8, {"hit_vs_ideal": 0.3}, valid=False, reason="behind", late_only=True),
    ]
    cliff = eviction_cliff(late)
    assert cliff is not None and cliff.load == pytest.approx(4 + 0.4 / 0.6 * 4)
    errors = [*late[:2], SweepPoint(8, {"hit_vs_ideal": 0.3}, valid=False, reason="errors")]
    assert eviction_cliff(errors) is None
    # the timing curves leave a late point out all the same
    assert [p.load for p in pareto_front(late, Goal("hit_vs_ideal"), Goal("hit_vs_ideal"))] == [2]
