"""The driver's account of its workers (``swarm.cluster.drains``), in one process.

Fake actors answer drains as scripted, behind the ``RemoteCalls`` seam, on a virtual clock:
records are written once, a worker that cannot be reached is asked again, one that does not
answer its last drain is counted lost without taking the others with it, and for every worker
rows + lost = sent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from swarm.cluster.drains import Drains, RemoteCalls, WorkerAccount
from swarm.runtime.live_stats import RunStats
from swarm.runtime.stop import StopConditions


class Unreachable(Exception):
    pass


class Gone(Exception):
    pass


@dataclass(eq=False)  # hashed by identity, as refs are
class Ref:
    answer: Callable[[], Any]
    ready: bool = True


@dataclass
class FakeWorker:
    """Scripted answers, one per drain asked: a (rows, sent, finished sessions) tuple, an
    exception to raise, or None for a drain that never answers."""

    script: list[Any]
    asked: int = 0
    drain: Any = field(init=False)

    def __post_init__(self) -> None:
        worker = self

        class Method:
            @staticmethod
            def remote() -> Ref:
                step = worker.script[min(worker.asked, len(worker.script) - 1)]
                worker.asked += 1
                if step is None:
                    return Ref(lambda: None, ready=False)
                if isinstance(step, Exception):

                    def fail() -> Any:
                        raise step

                    return Ref(fail)
                rows, sent, finished = step
                stats = RunStats(requests=sent, requests_sent=sent, sessions_finished=len(finished))
                batch = pa.RecordBatch.from_pydict({"status": ["ok"] * rows}) if rows else None
                return Ref(lambda: (batch, stats, list(finished)))

        self.drain = Method()


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def ns(self) -> int:
        return int(self.t * 1e9)

    def sleep(self, s: float) -> None:
        self.t += s


class Calls(RemoteCalls):
    def __init__(self, clock: Clock) -> None:  # no Ray: the fakes answer
        self.unavailable = (Unreachable,)
        self.fatal = (Gone,)
        self.get = lambda ref: ref.answer()

        def wait(refs: list[Any], timeout_s: float) -> list[Any]:
            ready = [r for r in refs if r.ready]
            if len(ready) < len(refs):
                clock.t += timeout_s  # waited the whole timeout for the rest
            return ready

        self.wait = wait


class Sink:
    def __init__(self) -> None:
        self.rows = 0

    def write_batch(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows


def drains_for(*workers: FakeWorker) -> tuple[Drains, list[WorkerAccount], Sink, Clock]:
    clock = Clock()
    accounts = [
        WorkerAccount(i, w, {"worker": i, "sessions": 2}, [f"s{i}-a", f"s{i}-b"])
        for i, w in enumerate(workers)
    ]
    sink = Sink()
    drains = Drains(
        accounts, sink, RunStats(), StopConditions(), calls=Calls(clock), clock_ns=clock.ns,
        monotonic=lambda: clock.t, sleep=clock.sleep, final_drain_s=60.0,
    )  # fmt: skip
    return drains, accounts, sink, clock


def settled(accounts: list[WorkerAccount]) -> list[dict[str, Any]]:
    for a in accounts:
        a.settle()
    return [a.info for a in accounts]


def test_records_are_written_once_and_the_live_view_merges_every_worker() -> None:
    drains, accounts, sink, _ = drains_for(
        FakeWorker([(3, 4, []), (1, 5, ["s0-a", "s0-b"])]), FakeWorker([(2, 2, ["s1-a"]), (0, 2, ["s1-b"])])
    )
    drains.tick(0.5)
    drains.final()
    assert sink.rows == 6 and drains.stats.requests == 7 and drains.stats.requests_sent == 7
    infos = settled(accounts)
    assert [i["alive"] for i in infos] == [True, True]
    # worker 0's last drain came with a record still in flight at the first: 4 + 1 rows, 5 sent
    assert [(i["requests"], i["requests_sent"], i["records_lost"]) for i in infos] == [(4, 5, 1), (2, 2, 0)]


def test_a_worker_stuck_on_an_earlier_drain_is_lost_alone_at_the_deadline() -> None:
    stuck = FakeWorker([(2, 3, ["s0-a"]), None])  # its second drain never answers
    healthy = FakeWorker([(1, 1, []), (1, 2, []), (1, 3, ["s1-a", "s1-b"])])
    drains, accounts, sink, clock = drains_for(stuck, healthy)
    drains.tick(0.5)
    drains.tick(0.5)  # the stuck worker's drain is now outstanding
    start = clock.t
    drains.final()
    assert clock.t - start >= 60.0  # it was given the whole deadline
    infos = settled(accounts)
    assert [i["alive"] for i in infos] == [False, True]
    assert "last drain did not come" in infos[0]["error"]
    assert infos[0]["sessions_cut_ids"] == ["s0-b"] and infos[0]["sessions_cut"] == 1
    assert (infos[0]["requests"], infos[0]["records_lost"], infos[0]["requests_sent"]) == (2, 1, 3)
    assert infos[1]["requests"] == infos[1]["requests_sent"] == 3 and sink.rows == 5


def test_an_unreachable_worker_is_asked_again_and_its_last_records_kept() -> None:
    flaky = FakeWorker(
        [(1, 1, []), Unreachable("socket closed"), Unreachable("socket closed"), (2, 3, ["s0-a"])]
    )
    drains, accounts, sink, _ = drains_for(flaky)
    drains.tick(0.5)
    drains.final()
    (info,) = settled(accounts)
    assert info["alive"] and info["requests"] == info["requests_sent"] == 3 and sink.rows == 3


def test_a_worker_gone_is_lost_with_its_cut_sessions_named() -> None:
    drains, accounts, _, _ = drains_for(FakeWorker([(2, 4, ["s0-b"]), Gone("ActorDiedError: node dead")]))
    drains.tick(0.5)
    drains.tick(0.5)
    assert not accounts[0].alive
    drains.final()  # nothing left to ask
    (info,) = settled(accounts)
    assert info["error"] == "Gone: ActorDiedError: node dead"
    assert info["sessions_cut_ids"] == ["s0-a"] and info["lost_at"] is not None
    assert info["requests"] + info["records_lost"] == info["requests_sent"] == 4
