"""Fleets without a router: the miss split and a lost replica on hand-built rows, ``--replica``
composition, the replica check before a run, the emulator naming itself, ``swarm emulate
--replicas N``, and replicas scraped with their label."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pytest

from swarm.analysis.fleet import _leading_seen, fleet_figures, replica_losses
from swarm.cli.compose import place_replicas
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.http_server import EmulatorThread
from swarm.engines.engine import REPLICA_LABEL
from swarm.errors import InputError
from swarm.runtime.fleet import fleet_replicas
from swarm.runtime.metrics_scraper import ServerMetricsScraper

S = 1_000_000_000
A, B = "http://127.0.0.1:1", "http://127.0.0.1:2"


def row(replica: str | None, t_s: float, hashes: list[int], prompt: int, cached: int, ideal: int, **kw: Any) -> dict[str, Any]:
    return {
        "replica": replica, "sent_ns": int(t_s * S), "e2e_ns": kw.get("e2e_ns", S // 10), "status": kw.get("status", "ok"),
        "block_hashes": hashes, "prompt_tokens": prompt, "prompt_tokens_est": prompt, "cached_tokens": cached,
        "ideal_cached_tokens_est": ideal, "warmup": kw.get("warmup", False), "repeat": kw.get("repeat", 0),
        "session_id": kw.get("session", 0), "attempt": 0,
    }  # fmt: skip


def table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows)


def test_misses_split_into_compulsory_evicted_and_routed_away() -> None:
    """One session's chain, its second call routed to the other replica, its third back on the
    second: each call's miss split by the formulas of ``analysis/fleet.py``, adding up."""
    rows = [
        row(A, 0, [1, 2], prompt=128, cached=0, ideal=0),  # all new: compulsory 128
        row(B, 1, [1, 2, 3], prompt=192, cached=0, ideal=128),  # 128 on A only: routed away; 64 new
        row(B, 2, [1, 2, 3, 4], prompt=256, cached=64, ideal=192),  # B saw 192 and served 64: 128 evicted
        row(A, 3, [9], prompt=64, cached=0, ideal=0, status="error"),  # failed: counted, not split
    ]
    fleet = fleet_figures(table(rows))
    assert fleet is not None and fleet.attributed_by == "header"
    a, b = fleet.replicas
    assert (a.replica, a.requests, a.failed, a.compulsory, a.evicted, a.routed_away) == (A, 2, 1, 128, 0, 0)
    assert (b.requests, b.compulsory, b.evicted, b.routed_away) == (2, 64 + 64, 128, 128)
    assert fleet.missed_tokens == 128 + 192 + 192
    assert fleet.share("routed_away") == pytest.approx(128 / 512)
    assert fleet.imbalance == pytest.approx(1.0)  # two requests each
    assert b.hit_vs_ideal == pytest.approx(64 / 320)


def test_each_repeat_starts_with_empty_caches_and_one_server_is_no_fleet() -> None:
    rows = [row(A, 0, [1], 64, 0, 0), row(B, 1, [1, 2], 128, 0, 64, repeat=1)]  # repeat 1 never saw block 1
    fleet = fleet_figures(table(rows))
    assert fleet is not None and fleet.replicas[1].routed_away == 0 and fleet.replicas[1].compulsory == 64
    assert fleet_figures(table([row(A, 0, [1], 64, 0, 0)])) is None
    # rows that name no replica are counted, and a listed replica that served nothing is shown
    named = fleet_figures(table([row(A, 0, [1], 64, 0, 0), row(None, 1, [1], 64, 0, 64)]), replicas=[A, B])
    assert named is not None and named.unattributed == 1 and [r.requests for r in named.replicas] == [1, 0]


def test_a_replica_that_stops_answering_is_a_loss_and_one_that_ends_with_the_run_is_not() -> None:
    rows = []
    for i in range(10):  # A and B serve 0-10 s at 80 % hit; then A fails a request in flight
        rows.append(row(B, i, [100 + i], 100, 80, 80, session=i % 4))
        rows.append(row(A, i + 0.5, [200 + i], 100, 80, 80, session=4 + i % 2))
    rows += [row(A, 10.2, [300], 100, 0, 80, status="stream_error", session=4, e2e_ns=S // 2)]
    # A's sessions go on on B, their first two calls there missing what A held
    rows += [row(B, 11 + k, [400 + k], 100, 10 if k < 2 else 80, 80, session=4 + k % 2) for k in range(6)]
    losses = replica_losses(rows, last_scrape_ns={})
    assert [loss.replica for loss in losses] == [A]
    loss = losses[0]
    assert loss.gone_at_s == pytest.approx(9.6) and loss.failed == 1
    assert loss.errors_recovered_after_s == pytest.approx(10.7 - 9.6)
    assert loss.sessions_lost_prefix == 2  # sessions 4 and 5 went on, on B
    assert loss.hit_recovered_after_s == pytest.approx(4.0)  # the bin [12.6, 13.6) s is the first back at 80 %
    # the same fleet with no failure and A's scrapes going to the end: A just had no more work
    quiet = [r for r in rows if r["status"] == "ok"]
    assert replica_losses(quiet, last_scrape_ns={A: 20 * S, B: 20 * S}) == []
    # ... while scrapes that stopped say it went
    assert [x.replica for x in replica_losses(quiet, last_scrape_ns={A: 10 * S, B: 20 * S})] == [A]
    # ... but not a last round or two missed, where scrapes come every 5 s (3 rounds: 15 s)
    assert replica_losses(quiet, last_scrape_ns={A: 10 * S, B: 20 * S}, scrape_gap_ns=5 * S) == []


def test_replicas_go_to_their_target() -> None:
    one = [{"name": "fleet"}]
    place_replicas(["http://127.0.0.1:1", "http://127.0.0.1:2"], one)
    assert one[0]["replicas"] == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    two = [{"name": "rr"}, {"name": "ca"}]
    place_replicas(["ca=http://127.0.0.1:3"], two)
    assert "replicas" not in two[0] and two[1]["replicas"] == ["http://127.0.0.1:3"]
    with pytest.raises(InputError, match="name the one it is behind"):
        place_replicas(["http://127.0.0.1:4"], two)


class _Router(BaseHTTPRequestHandler):
    workers: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:
        body = json.dumps({"workers": self.workers}).encode() if self.path == "/workers" else b"{}"
        self.send_response(200 if self.path == "/workers" else 404)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_router() -> Iterator[tuple[str, type[_Router]]]:
    handler = type("Listing", (_Router,), {"workers": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_replicas_are_read_from_the_router_and_checked_before_the_run(fake_router: tuple[str, type[_Router]]) -> None:
    url, listing = fake_router
    with EmulatorThread(EmulatorConfig(engine="sglang", port=0, timing="zero")) as emu:
        assert fleet_replicas("t", emu.url, [], "error", {}) == {}  # a plain engine: no /workers
        with pytest.raises(InputError, match="lists no workers"):
            fleet_replicas("t", url, [], "error", {})
        dead = "http://127.0.0.1:9"  # discard port: nothing listens
        listing.workers = [{"url": emu.url}, {"url": dead}]
        with pytest.raises(InputError, match=r"1 of 2 replicas \(listed by the router\) not answering: http://127.0.0.1:9"):
            fleet_replicas("t", url, [], "error", {})
        # the replicas alive, each with the name it answers with (the emulator: its URL)
        assert fleet_replicas("t", url, [], "warn", {}) == {emu.url: emu.url}
        assert fleet_replicas("t", url, [emu.url], "error", {}) == {emu.url: emu.url}  # given replicas win
        with pytest.raises(InputError, match="not answering"):
            fleet_replicas("t", url, [dead], "warn", {})  # none alive: an error even with warn


def test_the_emulator_names_itself_and_replicas_are_scraped_with_their_label() -> None:
    named = EmulatorConfig(engine="sglang", port=0, timing="zero", replica_name="left")
    with EmulatorThread(named) as left, EmulatorThread(EmulatorConfig(engine="sglang", port=0, timing="zero")) as right:
        with urllib.request.urlopen(left.url + "/health") as resp:
            assert resp.headers["X-Swarm-Replica"] == "left"
        with urllib.request.urlopen(right.url + "/v1/models") as resp:
            assert resp.headers["X-Swarm-Replica"] == right.url
        scraper = ServerMetricsScraper(
            target="fleet", engine="sglang", url="http://127.0.0.1:9/metrics",
            replicas=((left.url, left.url + "/metrics"), (right.url, right.url + "/metrics")),
        )  # fmt: skip
        assert scraper.scrape_once()
        urls = (left.url, right.url)
    times = {r[2] for r in scraper.rows}
    labelled = {lab for r in scraper.rows for lab in r[4].split(",") if lab.startswith(REPLICA_LABEL)}
    assert len(times) == 1 and labelled == {f"{REPLICA_LABEL}={u}" for u in urls}


def test_emulate_replicas_serves_a_fleet_and_stops_it_whole() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm", "emulate", "--replicas", "2", "--port", "0", "--timing", "zero"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        urls = [line.rsplit(" ", 1)[1].strip() for line in lines[:2]]
        assert all("listening on http://127.0.0.1:" in line for line in lines[:2]), lines
        assert "sglang_router.launch_router" in lines[2] and urls[0] in lines[2] and urls[1] in lines[2]
        names = set()
        for url in urls:
            with urllib.request.urlopen(url + "/health") as resp:
                names.add(resp.headers["X-Swarm-Replica"])
        assert names == set(urls)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    for url in urls:  # the replicas went with it
        with pytest.raises(OSError):
            urllib.request.urlopen(url + "/health", timeout=2)


def test_a_fleet_that_names_no_replica_is_split_and_judged_by_the_replicas_counters() -> None:
    """Real engines do not name themselves: the load share comes from each replica's own
    prompt-token counters, and a replica whose scrapes stop while the others' go on is lost,
    failures or not (a router retries what found a dead worker before its stream began)."""
    rows = [row(None, t, [t], 100, 50, 50) for t in range(10)] + [row(None, 6.5, [99], 100, 0, 0, status="stream_error")]

    def scrapes(replicas: tuple[tuple[str, int, float], ...]) -> pa.Table:
        """Each replica scraped every second to its ``last``, its counters rising ``per_s``."""
        return pa.Table.from_pylist([
            {"target": "f", "engine": "llamacpp", "t_ns": t * S, "metric": name, "labels": f"{REPLICA_LABEL}={rep}", "value": v}
            for rep, last, per_s in replicas for t in range(last + 1)
            for name, v in (("llamacpp:prompt_tokens_total", per_s * t), ("llamacpp:prompt_tokens_cached_total", per_s * t))
        ])  # fmt: skip

    metrics = scrapes(((A, 6, 30.0), (B, 10, 10.0)))
    fleet = fleet_figures(table(rows), metrics, replicas=[A, B])
    assert fleet is not None and fleet.attributed_by is None and fleet.unattributed == 11
    a, b = fleet.replicas
    assert a.server_prompt_tokens == pytest.approx(2 * 180) and b.server_prompt_tokens == pytest.approx(2 * 100)
    assert a.load_share == pytest.approx(360 / 560) and a.server_hit == pytest.approx(0.5)
    assert fleet.imbalance == pytest.approx(360 / 280)
    (loss,) = fleet.losses
    assert loss.replica == A and loss.gone_at_s == pytest.approx(6.0) and loss.sessions_lost_prefix is None
    retried = fleet_figures(table(rows[:-1]), metrics, replicas=[A, B])  # the router hid the failure
    assert retried is not None and [x.replica for x in retried.losses] == [A]
    both_to_the_end = scrapes(((A, 10, 30.0), (B, 10, 10.0)))  # A merely had no more work
    quiet = fleet_figures(table(rows[:-1]), both_to_the_end, replicas=[A, B])
    assert quiet is not None and quiet.losses == []


def test_a_run_with_a_replica_down_stops_before_sending_naming_it(tmp_path: Any) -> None:
    with EmulatorThread(EmulatorConfig(engine="sglang", port=0, timing="zero")) as emu:
        done = subprocess.run(
            [sys.executable, "-m", "swarm", "run", "--target", f"fleet={emu.url}", "--replica", emu.url,
             "--replica", "http://127.0.0.1:9", "--executor", "inprocess", "--agents", "2", "-o", str(tmp_path)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "1 of 2 replicas (given) not answering: http://127.0.0.1:9" in done.stderr
    assert "--replicas-down warn" in done.stderr
    assert not any(tmp_path.iterdir())  # nothing was started, nothing written


def test_rows_name_replicas_by_the_names_they_answered_with() -> None:
    """A replica started with ``--replica-name`` (or reached as localhost) is the manifest's URL
    in the report, not a second replica."""
    rows = [row("left", 0, [1], 64, 0, 0), row("right", 1, [1, 2], 128, 0, 64)]
    fleet = fleet_figures(table(rows), replicas=[A, B], names={A: "left", B: "right"})
    assert fleet is not None and [(r.replica, r.requests) for r in fleet.replicas] == [(A, 1), (B, 1)]
    assert fleet.replicas[1].routed_away == 64


def test_a_lost_replicas_counters_still_count_in_the_fleets_sum() -> None:
    from swarm.analysis.engine_metrics import target_figures

    samples = [
        {"target": "f", "engine": "sglang", "t_ns": t * S, "metric": name, "labels": f"{REPLICA_LABEL}={rep}", "value": v}
        for rep, last in ((A, 2), (B, 4)) for t in range(last + 1)
        for name, v in (("sglang:prompt_tokens_total", 100.0 * t), ("sglang:cached_tokens_total", 50.0 * t))
    ]  # fmt: skip
    figures = target_figures(pa.Table.from_pylist(samples))
    assert figures["cache_hit_ratio"] == pytest.approx(0.5)  # A's 200 prompt tokens are not lost with it


def test_a_sweep_point_counts_its_window_with_what_came_before_seeding_the_caches() -> None:
    from swarm.sweep.point_figures import SteadyWindow, fleet_point

    rows = [row(A, 0, [1, 2], 128, 0, 0), row(B, 10, [1, 2, 3], 192, 0, 128)]  # the window holds the second only
    window = SteadyWindow(start_ns=5 * S, end_ns=20 * S, requests=1, rule="test")
    point = fleet_point([(table(rows), window)])
    assert point is not None and point["routed_away_share"] == pytest.approx(128 / 192)


def test_routing_explains_the_share_of_a_hit_gap_its_misses_account_for() -> None:
    from swarm.analysis.compare import routing_share

    cache_aware = {"hit": 0.9, "routed_away_of_prompt": 0.0}
    round_robin = {"hit": 0.8, "routed_away_of_prompt": 0.05}
    assert routing_share(cache_aware, round_robin) == pytest.approx(0.5)
    assert routing_share(cache_aware, cache_aware) is None


def test_the_sglang_twin_states_its_load_as_sglangs_router_reads_it() -> None:
    with (
        EmulatorThread(EmulatorConfig(engine="sglang", port=0, timing="zero")) as emu,
        urllib.request.urlopen(emu.url + "/get_load") as resp,
    ):
        (rank,) = json.loads(resp.read())
    assert rank == {"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}


def test_the_leading_blocks_seen_are_those_a_walk_with_sets_finds() -> None:
    """Each row's leading hashes sent before by any replica and by its own, found from arrays
    (no Python int per hash), are what walking the rows in order with a set of the hashes
    seen (every replica's, and each one's) finds: prompts that share prefixes, a prompt sent
    twice, empty ones, a hash twice in one prompt, replicas that see nothing twice."""
    rng = np.random.default_rng(4)
    chains = [list(rng.integers(0, 2**63, 12, dtype=np.uint64)) for _ in range(5)]
    rows: list[list[int]] = []
    for _ in range(400):
        chain = chains[int(rng.integers(0, len(chains)))]
        cut = int(rng.integers(0, len(chain) + 1))
        own = rng.integers(0, 2**63, int(rng.integers(0, 3)))
        prompt = [int(h) for h in chain[:cut]] + [int(h) for h in own]
        if prompt and rng.random() < 0.05:
            prompt.append(prompt[0])  # a hash twice in one prompt
        rows.append(prompt)
    replicas = rng.integers(0, 7, len(rows))
    got_global, got_local = _leading_seen(pa.array(rows, pa.list_(pa.uint64())), replicas)

    def leading(hashes: list[int], seen: set[int]) -> int:
        return next((i for i, h in enumerate(hashes) if h not in seen), len(hashes))

    seen_any: set[int] = set()
    seen: dict[int, set[int]] = {}
    for i, (hashes, replica) in enumerate(zip(rows, replicas, strict=True)):
        mine = seen.setdefault(int(replica), set())
        assert (got_global[i], got_local[i]) == (leading(hashes, seen_any), leading(hashes, mine)), i
        seen_any.update(hashes)
        mine.update(hashes)
    assert 0 < got_local.sum() < got_global.sum()  # some prefixes were sent to another replica only


def test_a_failed_request_seeds_no_blocks() -> None:
    """A prompt that failed on one replica leaves nothing to route to: the same prompt sent
    next to another replica misses compulsorily, not as reuse routed away."""
    hashes = [11, 12, 13, 14]
    table = pa.table({
        "replica": ["a", "b", "c"], "sent_ns": [1, 2, 3], "e2e_ns": [5, 5, 5],
        "status": ["http_error", "ok", "ok"], "block_hashes": pa.array([hashes] * 3, pa.list_(pa.uint64())),
        "prompt_tokens": [256, 256, 256], "cached_tokens": [0, 0, 0],
        "ideal_cached_tokens_est": pa.array([None] * 3, pa.int64()), "warmup": [False] * 3,
    })  # fmt: skip
    figures = fleet_figures(table)
    assert figures is not None
    by = {r.replica: r for r in figures.replicas}
    assert (by["b"].compulsory, by["b"].routed_away) == (256, 0)  # a's failure seeded nothing
    assert (by["c"].compulsory, by["c"].routed_away) == (0, 256)  # b's answer did


def test_rows_without_hashes_split_their_misses_as_never_sent_before() -> None:
    """A table built by hand whose hashes are all missing (a column of nulls, or none at all)
    still gets its fleet figures: no prefix is known to have been sent before."""
    base = {
        "replica": ["a", "b"], "sent_ns": [1, 2], "e2e_ns": [5, 5], "status": ["ok", "ok"],
        "prompt_tokens": [64, 64], "cached_tokens": [0, 0],
        "ideal_cached_tokens_est": pa.array([None, None], pa.int64()),
    }  # fmt: skip
    for table in (pa.table({**base, "block_hashes": [None, None]}), pa.table(base)):
        figures = fleet_figures(table)
        assert figures is not None
        assert [(r.compulsory, r.routed_away) for r in figures.replicas] == [(64, 0), (64, 0)]
