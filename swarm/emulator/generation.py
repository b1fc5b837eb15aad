"""One request inside an emulated engine: ``Generation``, and how its reader waits for it.

Place in the map (docs/architecture.md, "The emulator"): what ``EngineModel.submit`` returns and
the engine model's step loop advances (``emulator.engine_model``); the HTTP server and the
simulation's twin client read its words or its times.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import AsyncGenerator
from typing import Protocol

from swarm.emulator.config import EmulatorConfig
from swarm.emulator.tokens import OUTPUT_IDS, OUTPUT_WORDS, output_ids, output_start
from swarm.token_ids import LaidOutIds, PromptIds, TokenIds


class _Model(Protocol):
    """What a request reads of the engine model it is in (``engine_model.EngineModel``)."""

    config: EmulatorConfig
    cancelled_waiting: bool
    cancelled_since_drop: list[Generation]

    def _timed_tokens(self, gen: Generation) -> AsyncGenerator[list[str], None]: ...
    def reader_went(self, gen: Generation) -> None: ...
    def stretch_ended(self, gen: Generation) -> int: ...
    def last_token_s(self, gen: Generation) -> float | None: ...


class PromptTooLong(ValueError):
    pass


class Generation:
    """One request inside the engine. Iterate ``tokens()`` to receive generated words. Its
    ``prompt`` and ``output`` are token ids (``swarm.token_ids``); the words it generates are
    those of ``OUTPUT_WORDS`` from the place its prompt picks (``tokens.output_start``). A
    prompt given laid out (``LaidOutIds``: a simulated agent's) is made into one array when the
    model reads it (its admission, its end, a preemption) and let go after each
    (``let_go_of_prompt``): not held while it runs, nor while it waits, but for a queue's head
    the scheduler has checked and the waiting prompts SGLang's longest-prefix-first order reads
    (128 or fewer)."""

    __slots__ = (
        "_laid_out",
        "_lock_handle",
        "_model",
        "_pending",
        "_prompt",
        "_start",
        "_waiter",
        "admit_hit",
        "admitted_s",
        "arrived_s",
        "cached_tokens",
        "cancelled",
        "computed",
        "finished",
        "first_token_s",
        "kv_tokens",
        "last_model_s",
        "max_new",
        "n_out",
        "preemptions",
        "prefill_left",
        "prompt_tokens",
        "times",
    )

    def __init__(self, model: _Model, prompt: PromptIds, max_new: int, arrived_s: float):
        self._model = model
        self._prompt: TokenIds | None
        self._laid_out: LaidOutIds | None
        if isinstance(prompt, LaidOutIds):
            self._prompt, self._laid_out = None, prompt
        else:
            self._prompt, self._laid_out = prompt, None
        self.prompt_tokens = len(prompt)
        self.max_new = max_new
        self.cached_tokens = 0
        #: how many tokens it has generated so far (their ids are ``output``, made when read)
        self.n_out = 0
        self._pending: list[str] = []
        #: its reader's wake-up while it waits for tokens or the end, made when it waits (an
        #: ``asyncio.Event`` a request took 860 bytes, and a fleet holds tens of thousands waiting)
        self._waiter: asyncio.Future[None] | None = None
        self.finished = False
        self.cancelled = False
        self.arrived_s = arrived_s
        self.admitted_s: float | None = None
        self.first_token_s: float | None = None
        #: the model's clock (``EngineModel.model_clock_s``) at its last token
        self.last_model_s = 0.0
        #: the scheduler's bookkeeping (``emulator.scheduler``): KV held, prompt tokens still to
        #: prefill, the cache hit at the last admission, times preempted
        self.kv_tokens = 0
        self.prefill_left = 0
        self.admit_hit = 0
        self.preemptions = 0
        self.computed: int | None = None
        self._lock_handle: object = None
        #: where its answer starts in ``OUTPUT_WORDS``
        self._start = output_start(prompt)
        #: the time of each emission, for a reader that waits for the end (``finished``)
        #: rather than for each token, as an ``array('d')`` (8 bytes a time; a decode
        #: stretch's times go on as one copy); None: not kept
        self.times: array[float] | None = None

    @property
    def prompt(self) -> TokenIds:
        """The prompt's ids (a laid-out prompt made into one array at a read, kept until
        ``let_go_of_prompt``)."""
        ids = self._prompt
        if ids is None:
            assert self._laid_out is not None
            ids = self._prompt = self._laid_out.ids()
        return ids

    @property
    def output(self) -> TokenIds:
        """The ids of the tokens generated so far, made at each read: a request's answer is
        ``OUTPUT_IDS`` from its ``_start``, so it keeps only their count (``n_out``); an array
        grown with each token was written at every step of every request running, and held
        while it ran."""
        return output_ids(self._start, 0, self.n_out)

    def sequence(self) -> TokenIds:
        """Its prompt and output so far, in one new array (the prompt's own where none yet)."""
        return self.prompt + self.output if self.n_out else self.prompt

    def let_go_of_prompt(self) -> None:
        """Drop the array a laid-out prompt was made into (made again at its next read): once
        admitted, a request's prompt is read again only at its end or a preemption."""
        if self._laid_out is not None:
            self._prompt = None

    def output_words(self) -> list[str]:
        """The words generated so far (a decode stretch's steps ended by now counted, as
        ``last_token_s`` counts them: the text of a request that went in one)."""
        n, start = len(OUTPUT_WORDS), self._start
        return [OUTPUT_WORDS[(start + i) % n] for i in range(self.n_out + self._model.stretch_ended(self))]

    def _emit(self, now_s: float) -> None:
        at = (self._start + self.n_out) % len(OUTPUT_IDS)
        self.n_out += 1
        if self.first_token_s is None:
            self.first_token_s = now_s
        if self.n_out >= self.max_new:
            self.finished = True
        times = self.times
        if times is None:
            self._pending.append(OUTPUT_WORDS[at])
            self._wake_reader()
        else:  # a reader of the end only (no stream to hand words to): woken at the finish
            times.append(now_s)  # (``EngineModel._release``)

    async def tokens(self) -> AsyncGenerator[list[str], None]:
        """Yield lists of newly generated words as they come out, until the request finishes."""
        if self._model.config.timing != "batch":
            async for words in self._model._timed_tokens(self):
                yield words
            return
        try:
            while True:
                if not self._pending:
                    if self.finished:
                        return
                    await self._woken()
                words, self._pending = self._pending, []
                if words:
                    yield words
        finally:
            if not self.finished:
                self.cancel()

    def end_waiter(self) -> asyncio.Future[None] | None:
        """What a reader of its end awaits, again until this is None (finished): a future
        settled at its end or at a wake-up before it (the step-loop timing only; its emissions
        are in ``times`` when ``times`` was set before it began). Awaited by the reader itself,
        not in a coroutine of the request's: one coroutine less held a request waiting (a
        fleet holds tens of thousands). The reader ends with ``reader_left``."""
        if self.finished:
            return None
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        return waiter

    def reader_left(self) -> None:
        """The reader of its end stopped waiting: at its end, or going (cancelled), which
        cancels the request."""
        self._waiter = None
        if not self.finished:
            self.cancel()

    def _wake_reader(self) -> None:
        """Wake the reader if it waits (a wake-up while none waits is lost: a reader checks
        what it waits for before it waits)."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            settle(waiter)

    async def _woken(self) -> None:
        """Wait for ``_wake_reader``: one reader a request (a second waiting at once would
        take the first's place)."""
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            if self._waiter is waiter:
                self._waiter = None

    def cancel(self) -> None:
        """The reader went: the request leaves the queue, or the batch at its next step."""
        self.cancelled = True
        model = self._model
        model.cancelled_waiting = True
        model.cancelled_since_drop.append(self)
        model.reader_went(self)

    def last_token_s(self) -> float | None:
        """The time of its last token by now, None before its first or where its times are
        not kept (a stream's reader, ``times`` None): a decode stretch hands its tokens over at
        its end (``step_model``), and this counts its steps ended by now without handing them
        over (a watchdog's check that did so copied into every running request's arrays each
        time: 9 % of a simulation of 100,000 agents)."""
        return self._model.last_token_s(self)


def settle(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


def loop_now() -> float:
    """The running event loop's clock (``time.monotonic`` for asyncio's own loops; the virtual
    clock under ``swarm simulate``), else the monotonic clock."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()
