"""A simulated target: engine twins behind a router, answered in virtual time.

Place in the map (docs/architecture.md, "Simulation"): the EngineClient of ``swarm simulate``.
Where ``HttpEngineClient`` renders a request, sends it and times the reads of its answer,
``TwinClient`` hands the request's prompt to the twin a ``Router`` chooses, as ``swarm
emulate``'s HTTP server does (the same ``EngineModel``: cache, scheduler, step loop), and
waits, on the virtual clock, for it to finish. The record is built as the HTTP client builds
its own: ``chunk_ns`` from the twin's emissions (one per step, as one read per event of the
real emulator's stream), ``ttft_ns`` its first, ``cached_tokens`` what the engine would report,
``replica`` the twin that served it (``replica_from`` ``simulated``), the clock ``virtual``.

A prompt the twin refuses (longer than it takes) is an ``http_error`` row with status 400, as
the emulator answers; a request past the HTTP client's deadlines (first token, total, a
silence after the first token: ``--request-timeout`` and the spec's ``timeouts``) is a
``timeout`` row without usage and leaves the twin's batch, as a client that hangs up does; a
hard stop makes it ``cancelled``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from array import array
from collections.abc import Callable, Sequence

import numpy as np

from swarm.emulator.config import EmulatorConfig
from swarm.emulator.engine_model import EngineModel
from swarm.emulator.generation import Generation, PromptTooLong
from swarm.emulator.tokens import PromptTokenizer
from swarm.engines.registry import get_engine
from swarm.record import RequestRecord, Status
from swarm.request import EngineRequest, Timeouts
from swarm.sim.routing import CacheAware, Router, make_router
from swarm.sim.virtual_loop import CLOCK_RESOLUTION_S, VirtualClock, VirtualTimeLoop
from swarm.texts import SharedRun, as_str
from swarm.token_ids import PromptIds

#: ``replica_from`` of a simulated record: the simulator knows which twin served it
REPLICA_FROM_SIMULATED = "simulated"
#: the most decode steps a twin runs with one event (``emulator.step_model``: the same tokens
#: at the same times as step by step; 64 steps of a busy sglang twin are about half a second)
STRETCH_STEPS = 64


class TwinFleet:
    """One target's twins: ``replicas`` engine models of one ``EmulatorConfig`` behind a router
    of ``routing`` (one replica: no router) whose evictions ``clock_s`` times (the virtual
    clock's seconds; None: a cache-aware router never evicts). Made and started inside the
    virtual loop."""

    def __init__(
        self, config: EmulatorConfig, replicas: int = 1, routing: str = "round_robin",
        clock_s: Callable[[], float] | None = None,
    ) -> None:  # fmt: skip
        if replicas < 1:
            raise ValueError("a fleet has at least one replica")
        self.config = config
        self.models = [EngineModel(config) for _ in range(replicas)]
        for model in self.models:  # its readers wait for each request's end: steps by stretches
            model.stretch_steps = STRETCH_STEPS
        self.names = [f"sim://{config.engine}/{i}" for i in range(replicas)] if replicas > 1 else [f"sim://{config.engine}"]
        self.router: Router = make_router(routing, replicas, clock_s)
        #: whether the router keeps the prompts it routes (a tree that holds corpus runs by
        #: reference: ``EngineRequest.prompt_runs``)
        self.keeps_prompts = replicas > 1 and isinstance(self.router, CacheAware)
        #: requests sent to each replica and not yet ended (what a router counts as its load)
        self.loads = [0] * replicas
        self.tokens = PromptTokenizer(config.tokenizer)

    def start(self) -> None:
        for model in self.models:
            model.start()

    async def stop(self) -> None:
        for model in self.models:
            await model.stop()

    def prompt_of(self, request: EngineRequest) -> PromptIds:
        """The prompt's tokens, as the emulator counts a chat request's messages: the word ids
        the sender gave (``prompt_ids``, laid out or not; the twin's tokens are words), else its
        text tokenised."""
        if request.prompt_ids is not None and self.tokens.words:
            return request.prompt_ids
        return self.tokens.parts([as_str(m.content) for m in request.messages])

    def route(self, prompt: PromptIds, runs: Sequence[SharedRun] = ()) -> int:
        """The replica for ``prompt`` (``runs``: where its ids are the corpus's)."""
        return 0 if len(self.models) == 1 else self.router.choose(prompt, self.loads, runs)


class TwinClient:
    """``EngineClient`` over a ``TwinFleet`` on a virtual clock (the module docstring)."""

    def __init__(
        self,
        fleet: TwinFleet,
        clock: VirtualClock,
        *,
        target: str,
        engine: str,
        dialect: str,
        model: str,
        timeouts: Timeouts,
        wall_minus_perf_ns: int,
    ) -> None:
        self.fleet = fleet
        self.clock = clock
        self.target = target
        self.engine = engine
        self.dialect = dialect
        self.model = model
        self.timeouts = timeouts
        #: a request's ``prompt_ids`` are read when the twins count words (``TwinFleet.prompt_of``)
        self.reads_token_ids = fleet.tokens.words
        #: a request's ``prompt_runs`` are read with its ids where the router keeps prompts
        self.reads_prompt_runs = self.reads_token_ids and fleet.keeps_prompts
        self._wall0 = wall_minus_perf_ns
        self.profile = get_engine(engine)
        self._absent_is_zero = self.profile.cached_absent_means_zero

    def encode(self, request: EngineRequest) -> bytes:
        """No body to build ahead: the twin reads the request's messages (``send`` ignores a
        payload)."""
        return b""

    async def send(self, request: EngineRequest, payload: bytes | None = None) -> RequestRecord:
        identity = request.identity
        if not identity.request_id or identity.target != self.target:
            identity = dataclasses.replace(
                identity, request_id=identity.request_id or secrets.token_hex(8), target=self.target,
                engine=identity.engine or self.engine,
            )  # fmt: skip
        t0 = self.clock.now_ns
        sent_wall = self._wall0 + t0
        fleet = self.fleet
        prompt = fleet.prompt_of(request)
        replica = fleet.route(prompt, request.prompt_runs if prompt is request.prompt_ids else ())
        status, http_status, error = Status.OK, 200, None
        gen: Generation | None = None
        try:
            gen = fleet.models[replica].submit(prompt, request.max_tokens)
        except PromptTooLong as exc:
            status, http_status, error = Status.HTTP_ERROR, 400, str(exc)
        if gen is not None:
            status, error = await self._wait(gen, replica)
        end = self.clock.now_ns
        chunk_ns = self._chunks(gen, t0, end, request.stream) if status is Status.OK else array("q")
        scheduled = request.scheduled_ns if request.scheduled_ns is not None else sent_wall
        answered = status is Status.OK  # usage comes with a whole answer, as over HTTP
        return RequestRecord(
            identity=identity, dialect=self.dialect, model=self.model, stream=request.stream,
            scheduled_ns=scheduled, sent_ns=sent_wall, queue_ns=sent_wall - scheduled,
            slot_wait_ns=request.slot_wait_ns, ttft_ns=chunk_ns[0] if chunk_ns else None, e2e_ns=end - t0,
            chunk_ns=chunk_ns, clock="virtual", replica=fleet.names[replica],
            replica_from=REPLICA_FROM_SIMULATED, status=status, http_status=http_status, error=error,
            finish_reason="length" if status is Status.OK else None, max_tokens=request.max_tokens,
            prompt_tokens=len(prompt) if answered else None,
            completion_tokens=gen.n_out if answered and gen is not None else None,
            cached_tokens=self._cached(gen) if answered else None, prompt_tokens_est=request.prompt_tokens_est,
            ideal_cached_tokens_est=request.ideal_cached_tokens_est, block_hashes=request.block_hashes,
            prompt_parts=tuple(as_str(m.content) for m in request.messages) if request.keep_text else None,
            prompt_roles=tuple(m.role for m in request.messages) if request.keep_text else None,
            output_text=" ".join(gen.output_words()) if request.keep_text and gen is not None else None,
        )  # fmt: skip

    async def _wait(self, gen: Generation, replica: int) -> tuple[Status, str | None]:
        """Wait for ``gen`` to finish (its emissions noted) under the HTTP client's deadlines:
        the first token, the whole request, and the longest silence after the first token
        (``_Deadlines``); one that passes ends the request as a ``timeout`` and the twin lets
        it go."""
        fleet = self.fleet
        fleet.loads[replica] += 1
        deadlines = _Deadlines(gen, self.timeouts)
        try:
            if fleet.config.timing == "batch":
                gen.times = array("d")
                try:
                    while (waiter := gen.end_waiter()) is not None:
                        await waiter
                finally:
                    gen.reader_left()
            else:  # the fixed and zero timings emit as they are read
                await self._read(gen)
        except asyncio.CancelledError:
            if deadlines.fired is None:
                return Status.CANCELLED, "cancelled by the run"
            deadlines.absorb()
            return Status.TIMEOUT, deadlines.fired
        finally:
            deadlines.disarm()
            fleet.loads[replica] -= 1
        return Status.OK, None

    @staticmethod
    async def _read(gen: Generation) -> None:
        """Read ``gen``'s tokens as a stream (the fixed and zero timings); the time of each
        read into ``gen.times`` once it ends."""
        loop = asyncio.get_running_loop()
        times = array("d")
        async for _words in gen.tokens():
            times.append(loop.time())
        gen.times = times

    @staticmethod
    def _chunks(gen: Generation | None, t0: int, end: int, stream: bool) -> array:
        """The record's ``chunk_ns``: the emissions' times from ``t0``, each rounded as
        ``round`` does (half to even), in one numpy pass, held as an ``array('q')`` (8 bytes
        a time, where a tuple's ints take about 36: a thousand a request, and the trace sink
        reads the array's bytes in place); the times are read in place too (``Generation.times``,
        an ``array('d')``)."""
        if gen is None or not gen.times:
            return array("q")
        if not stream:  # the whole answer at once
            return array("q", (end - t0,))
        times = np.frombuffer(gen.times, dtype=np.float64)
        return array("q", (np.rint(times * 1e9).astype(np.int64) - t0).tobytes())

    def _cached(self, gen: Generation | None) -> int | None:
        if gen is None:
            return None
        behaviour, config = self.fleet.models[0].behaviour, self.fleet.config
        if behaviour.reports_cached_tokens(config, gen.cached_tokens):
            return gen.cached_tokens
        return 0 if self._absent_is_zero else None


#: how close to the idle limit a silence counts as reaching it (the virtual clock's nanosecond)
IDLE_GRAIN_S = 1e-9
#: ``_Deadlines``' checks: the first token's, the whole request's, the silence's
_FIRST, _TOTAL, _IDLE = 0, 1, 2


class _Deadlines:
    """The HTTP client's watchdog on the virtual clock: cancels the waiting task when the first
    token, the whole request or a silence after the first token (``Timeouts``) runs past its
    limit, remembering which (the same texts as ``clients.client``). Its deadlines are checked
    in turn by one timer at a time, each at the place among timers of its instant that it took
    when set (``VirtualTimeLoop.place``): as a timer each did, at a third of the timers (three
    set with every request were 3 % of a simulation). Checks due within the clock's nanosecond
    run together, at the first one's place: a timer of another kind due at exactly the instant
    of a later one of them, and set between them, now runs after it (an exact coincidence of
    two float sums; no trace checked met one)."""

    # slots: one a request in flight (a dict of attributes each was 8 MB of 100,000 simulated
    # agents at 200 s)
    __slots__ = ("_due", "_gen", "_handle", "_loop", "_task", "_timeouts", "fired")

    def __init__(self, gen: Generation, timeouts: Timeouts) -> None:
        task, loop = asyncio.current_task(), asyncio.get_running_loop()
        assert task is not None
        if not isinstance(loop, VirtualTimeLoop):
            raise RuntimeError("a twin's client runs on the virtual clock's loop (VirtualTimeLoop)")
        self._task, self._gen, self._loop, self._timeouts = task, gen, loop, timeouts
        self.fired: str | None = None
        #: the checks set and not yet run: (due time, place, which: ``_FIRST``, ``_TOTAL`` or
        #: ``_IDLE``), small ints where a bound method each was three objects more a request
        self._due: list[tuple[float, int, int]] = []
        self._handle: asyncio.TimerHandle | None = None
        if timeouts.first_token_s is not None:
            self._later(timeouts.first_token_s, _FIRST)
        if timeouts.total_s is not None:
            self._later(timeouts.total_s, _TOTAL)
        if timeouts.idle_s is not None:
            self._later(timeouts.idle_s, _IDLE)
        self._arm()

    def _later(self, delay_s: float, check: int) -> None:
        self._due.append((self._loop.time() + delay_s, self._loop.place(), check))

    def _arm(self) -> None:
        """One timer for the first check due (by time, then place)."""
        if not self._due or self.fired is not None:
            return
        when, place, _ = min(self._due)
        self._handle = self._loop.call_at_place(when, place, self._run)

    def _run(self) -> None:
        """The checks due now, in order: those the loop would run in this turn as timers of
        their own (due within ``CLOCK_RESOLUTION_S``), in their order."""
        due_before_s = self._loop.time() + CLOCK_RESOLUTION_S
        while self._due and self.fired is None:
            entry = min(self._due)
            if entry[0] >= due_before_s:
                break
            self._due.remove(entry)
            self._check(entry[2])  # may set the next check (an idle one)
        self._arm()

    def _check(self, which: int) -> None:
        timeouts = self._timeouts
        if which == _IDLE:
            self._idle()
        elif which == _FIRST:
            if self._gen.first_token_s is None:
                self._fire(f"no first token within {timeouts.first_token_s:g} s")
        elif which == _TOTAL:
            self._fire(f"request not finished within {timeouts.total_s:g} s")

    def _fire(self, reason: str) -> None:
        if self.fired is None and not self._gen.finished:
            self.fired = reason
            self._task.cancel()

    def _idle(self) -> None:
        """Past the first token, the time since the last one against the idle limit; checked
        again when it could next run out."""
        idle_s = self._timeouts.idle_s
        assert idle_s is not None
        last_s = self._gen.last_token_s()  # a decode stretch's steps ended by now counted
        if last_s is None:  # no token yet: the first-token deadline's to judge
            self._later(idle_s, _IDLE)
            return
        silent_s = self._loop.time() - last_s
        # within a nanosecond (the virtual clock's grain) is run out: a silence a rounding short
        # of the limit re-armed a 1e-17 s timer that never moved the clock, for ever
        if silent_s >= idle_s - IDLE_GRAIN_S:
            self._fire(f"stream stalled: no data for {idle_s:g} s after the first token")
        else:
            self._later(idle_s - silent_s, _IDLE)

    def absorb(self) -> None:
        """The cancel was ours: answered, so the task goes on (Python 3.11+)."""
        uncancel = getattr(self._task, "uncancel", None)
        if uncancel is not None:
            uncancel()

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._due.clear()
