"""ReplaySource: a ReplayPlan as a request source, timed or dependent, once or many times over.

Place in the map (docs/architecture.md, "Runtime"): the replay's RequestSource; the Dispatcher
sends what it schedules. ``timed``: item *i* is due at ``offset_i / speed`` after the start,
whatever happens to the others. ``dependent``: an item with parents is sent when all its
parents' replayed requests have finished, plus its recorded gap divided by ``speed``, so a
slower engine never receives a child before its parent; items without parents keep their
timed offsets. Every request gets the same accounting as a swarm run: prompt token estimate
(with the run's tokenizer), 64-token block hashes and the ideal cached tokens.

Sessions. Items are grouped into sessions: the items of one recorded session id, joined with
everything they depend on. A session stays on one worker when the replay is split over Ray
workers (``split``), so a child always sees its parent's end. ``copies`` (``--copies N``)
plays every session N times: copy *k* > 0 has its own user content (the first non-system
message is marked with the copy; block ids that only this session used are renamed) but the
trace's shared system prompts (and block ids several sessions share) stay shared.
``max_sessions`` (``--max-sessions C``) keeps at most C sessions in progress: a new one starts
(no earlier than its recorded offset) when one ends, a closed loop like a pool of users.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import random
from array import array
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from swarm.record import Status
from swarm.replay.blocktext import block_words, prompt_words
from swarm.replay.plan import ReplayItem, ReplayPlan, session_roots
from swarm.request import ChatMessage, EngineRequest
from swarm.runtime.clocks import Placement
from swarm.runtime.dispatcher import Dispatcher, Outgoing, Scheduled
from swarm.runtime.retry import RetryPolicy, retry_request_id
from swarm.runtime.sources import SendLimits, SourceContext, share
from swarm.workload.prefix import block_hashes
from swarm.workload.tokenizer import Tokenizer, WordTokenizer, word_ids

MODES = ("timed", "dependent")
#: What copy k (> 0) of a session puts before its first non-system message, so that its content
#: is its own: one word naming the copy and the session (no two copies share it). Copy k of an
#: item has index ``k * stride + index``, stride above every index of the plan.
_COPY_MARK = "[copy-{k}-{session}]"


def item_messages(item: ReplayItem) -> tuple[ChatMessage, ...]:
    """The prompt of an item: its recorded parts, or one user message of its block text."""
    return _item_prompt(item)[0]


def _item_prompt(item: ReplayItem) -> tuple[tuple[ChatMessage, ...], list[str] | None]:
    """The messages, and for a synthesised prompt its words (its tokens for the word tokenizer)."""
    if item.prompt_parts is not None:
        roles = item.prompt_roles or ("user",) * len(item.prompt_parts)
        return tuple(
            ChatMessage(role, text) for role, text in zip(roles, item.prompt_parts, strict=False)
        ), None
    words = prompt_words(item.block_ids, item.block_tokens, item.prompt_tokens, tail_seed=str(item.index))
    return (ChatMessage("user", " ".join(words)),), words


@dataclass(frozen=True, slots=True)
class ReplaySession:
    """The items of one session (one copy), in the plan's order."""

    key: str
    items: tuple[ReplayItem, ...]

    @property
    def first_offset_s(self) -> float:
        return min(it.offset_s for it in self.items)


def group_sessions(items: Sequence[ReplayItem]) -> list[ReplaySession]:
    """Sessions of a plan: items joined by their recorded session id and by dependencies,
    ordered by their first offset (then by their first item)."""
    roots = session_roots(items)
    groups: dict[int, list[ReplayItem]] = {}
    for it in items:
        groups.setdefault(roots[it.index], []).append(it)
    sessions = [
        ReplaySession(g[0].identity.session_id or f"item{g[0].index}", tuple(g)) for g in groups.values()
    ]
    sessions.sort(key=lambda s: (s.first_offset_s, s.items[0].index))
    return sessions


def copy_session(session: ReplaySession, k: int, stride: int, shared_blocks: frozenset[int]) -> ReplaySession:
    """Copy ``k`` (> 0) of a session: new indices and ids, its own user content, the shared
    system prompts and shared blocks kept."""
    mark = _COPY_MARK.format(k=k, session=hashlib.blake2b(session.key.encode(), digest_size=4).hexdigest())
    out = []
    for it in session.items:
        parts = it.prompt_parts
        if parts is not None:
            roles = it.prompt_roles or ("user",) * len(parts)
            first = next((i for i, r in enumerate(roles) if r != "system"), None)
            if first is not None:
                parts = (*parts[:first], f"{mark} {parts[first]}", *parts[first + 1 :])
        ident = it.identity
        out.append(
            dataclasses.replace(
                it,
                index=k * stride + it.index,
                parents=tuple(k * stride + p for p in it.parents),
                block_ids=tuple(b if b in shared_blocks else _renamed_block(b, k) for b in it.block_ids),
                prompt_parts=parts,
                identity=dataclasses.replace(
                    ident,
                    # a request without a session stays without one (its request id says the copy)
                    session_id=f"{ident.session_id}#{k}" if ident.session_id else "",
                    request_id=f"{ident.request_id}#{k}",
                ),
            )
        )
    return ReplaySession(f"{session.key}#{k}", tuple(out))


def midlife_session(session: ReplaySession, low: float, high: float) -> ReplaySession:
    """``session`` started mid-life: its items in send order (offset, then index), the first
    ``k`` of them dropped (``k`` the share drawn uniformly between ``low`` and ``high`` of its
    items, from a stream named after the session, rounded down); each dropped item that a kept
    one waits for is re-sent first as a warm-up (``max_tokens`` 1, marked ``warmup``, due at the
    session's start) and the kept items wait for it instead; the kept items' offsets move back
    by as long as the dropped ones took, so the session starts when it was due to."""
    items = sorted(session.items, key=lambda it: (it.offset_s, it.index))
    if len(items) < 2:
        return session
    share_ = random.Random(f"replay-start:{session.key}").uniform(low, high)
    k = int(share_ * len(items))
    if k == 0:
        return session
    dropped = {it.index: it for it in items[:k]}
    kept = items[k:]
    start_s, shift_s = items[0].offset_s, kept[0].offset_s - items[0].offset_s
    warm: dict[int, ReplayItem] = {}
    for it in kept:
        for p in it.parents:
            if p in dropped and p not in warm:
                src = dropped[p]
                ident = src.identity
                warm[p] = dataclasses.replace(
                    src, index=-1 - src.index, offset_s=start_s, parents=(), gap_s=0.0,  # unique: indices are >= 0
                    max_tokens=1, identity=dataclasses.replace(
                        ident, request_id=f"{ident.request_id or src.index}:warmup", warmup=True
                    ),
                )  # fmt: skip
    moved = [
        dataclasses.replace(
            it,
            offset_s=max(start_s, it.offset_s - shift_s),
            parents=tuple(warm[p].index if p in warm else p for p in it.parents if p not in dropped or p in warm),
        )
        for it in kept
    ]
    return ReplaySession(session.key, (*warm.values(), *moved))


def _renamed_block(block_id: int, k: int) -> int:
    return (block_id * 1_000_003 + k * 7_919) & ((1 << 62) - 1)


def shared_block_ids(sessions: Iterable[ReplaySession]) -> frozenset[int]:
    """Block ids that appear in more than one session (shared content, e.g. system prompts)."""
    seen: dict[int, str] = {}
    shared: set[int] = set()
    for s in sessions:
        for it in s.items:
            for b in it.block_ids:
                owner = seen.setdefault(b, s.key)
                if owner != s.key:
                    shared.add(b)
    return frozenset(shared)


@dataclass(frozen=True, slots=True)
class SharedContent:
    """What a replay's sessions share by design: system messages (texts, in order) and leading
    runs of block ids that several sessions use (ids, block length in tokens)."""

    system_texts: list[tuple[str, ...]]
    block_leads: list[tuple[tuple[int, ...], int]]


class ReplaySource:
    """A ReplayPlan's sessions (``copies`` times over) as a RequestSource."""

    kind = "replay"

    def __init__(
        self,
        plan: ReplayPlan,
        *,
        mode: str = "timed",
        speed: float = 1.0,
        copies: int = 1,
        max_sessions: int = 0,
        limits: SendLimits | None = None,
        retry: RetryPolicy | None = None,
        tokenizer: Tokenizer | None = None,
        sessions: Sequence[ReplaySession] | None = None,
        shared: SharedContent | None = None,
        start_ratios: tuple[float, float] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        if speed <= 0:
            raise ValueError("speed must be positive")
        if copies < 1:
            raise ValueError("copies must be at least 1")
        self.mode = mode
        self.speed = speed
        self.copies = copies
        self.max_sessions = max_sessions
        self.tokenizer = tokenizer or WordTokenizer()
        #: retries of a retryable failure (off by default, as for agents), and the first backoff
        self.retry = retry or RetryPolicy()
        #: the run's limits (``SendSpec.limits``), or this part's share of them
        self.limits = limits or SendLimits()
        if sessions is None:
            base = group_sessions(plan.items)
            stride = max((it.index for it in plan.items), default=0) + 1
            shared_blocks = shared_block_ids(base) if copies > 1 else frozenset()
            expanded = list(base)
            for k in range(1, copies):
                expanded += [copy_session(s, k, stride, shared_blocks) for s in base]
            expanded.sort(key=lambda s: s.first_offset_s)  # stable: copy 0 first at equal offsets
            if start_ratios is not None:  # --start-at mid
                if mode != "dependent":
                    raise ValueError("sessions started mid-life need mode dependent")
                expanded = [midlife_session(s, *start_ratios) for s in expanded]
            sessions = expanded
        # the plan's items are not kept: a part shipped to a worker carries only its sessions
        self.plan = dataclasses.replace(plan, items=[])
        self.sessions = list(sessions)
        self._shared: SharedContent | None = shared

    @property
    def requests(self) -> int:
        return sum(len(s.items) for s in self.sessions)

    def session_count(self) -> int:
        return len(self.sessions)

    def session_ids(self) -> list[str]:
        return [s.key for s in self.sessions]

    def split(self, parts: int) -> list[ReplaySource]:
        """Sessions dealt round-robin in start order; each part runs on one worker with its
        share of the in-flight cap and of ``max_sessions`` (fewer parts than asked when either
        is smaller: each part needs at least one of each)."""
        parts = self.limits.usable_parts(parts)
        if self.max_sessions > 0:
            parts = min(parts, self.max_sessions)
        limits = self.limits.split(parts)
        self.shared_content()  # over all sessions, before they are dealt
        return [
            self._part(
                self.sessions[w::parts],
                share(self.max_sessions, parts, w) if self.max_sessions > 0 else 0,
                limits[w],
            )
            for w in range(parts)
        ]

    def _part(self, sessions: Sequence[ReplaySession], max_sessions: int, limits: SendLimits) -> ReplaySource:
        return ReplaySource(
            self.plan, mode=self.mode, speed=self.speed, max_sessions=max_sessions, limits=limits,
            retry=self.retry, tokenizer=self.tokenizer, sessions=sessions, shared=self._shared,
        )  # fmt: skip

    def shared_content(self) -> SharedContent:
        """What sessions share by design, worked out over all sessions before a split (a part
        keeps the whole source's): each prompt's system messages, and for block-id prompts the
        leading whole blocks that several sessions use (kept as ids: small to ship)."""
        if self._shared is None:
            systems: dict[tuple[str, ...], None] = {}
            leads: dict[tuple[tuple[int, ...], int], None] = {}
            shared_blocks = shared_block_ids(self.sessions)
            for s in self.sessions:
                for it in s.items:
                    if it.prompt_parts is not None:
                        roles = it.prompt_roles or ()
                        texts = tuple(
                            t for r, t in zip(roles, it.prompt_parts, strict=False) if r == "system"
                        )
                        if texts and roles[: len(texts)] == ("system",) * len(texts):
                            systems.setdefault(texts, None)
                        continue
                    lead = 0
                    while (
                        lead < len(it.block_ids)
                        and it.block_ids[lead] in shared_blocks
                        and (lead + 1) * it.block_tokens <= it.prompt_tokens
                    ):
                        lead += 1
                    if lead:
                        leads.setdefault((it.block_ids[:lead], it.block_tokens), None)
            self._shared = SharedContent(list(systems), list(leads))
        return self._shared

    def shared_prefixes(self) -> list[list[object]]:
        """``shared_content`` as token prefixes, for a worker's ideal index."""
        shared = self.shared_content()
        words_are_tokens = isinstance(self.tokenizer, WordTokenizer)
        out: list[list[object]] = []
        for texts in shared.system_texts:
            out.append([t for text in texts for t in self.tokenizer.ids(text)])
        for ids, block_tokens in shared.block_leads:
            words = [w for bid in ids for w in block_words(bid, block_tokens)]
            out.append(list(words) if words_are_tokens else list(self.tokenizer.encode(" ".join(words))))
        return out

    def start(self, d: Dispatcher, run: SourceContext, placement: Placement) -> _ReplayRun:
        return _ReplayRun(self, d, run, placement.worker)


class _ReplayRun:
    """The state of one ReplaySource being sent by one Dispatcher."""

    def __init__(self, source: ReplaySource, d: Dispatcher, run: SourceContext, worker: int) -> None:
        self.worker = worker
        self.source = source
        self.d = d
        self.run = run
        self.speed = source.speed
        self.word_tokens = isinstance(source.tokenizer, WordTokenizer)
        self.end_perf_ns: dict[int, int] = {}
        self.waiting_parents: dict[int, int] = {}
        self.children: dict[int, list[ReplayItem]] = {}
        self.session_of: dict[int, int] = {}
        self.remaining: list[int] = []
        self.cut: list[bool] = []
        self.started: list[bool] = []
        self.ended: list[bool] = []
        self._done_events: dict[int, asyncio.Event] = {}
        known: set[int] = set()
        for s_i, s in enumerate(source.sessions):
            self.remaining.append(len(s.items))
            self.cut.append(False)
            self.started.append(False)
            self.ended.append(False)
            for it in s.items:
                self.session_of[it.index] = s_i
                known.add(it.index)
        self.roots: dict[int, list[ReplayItem]] = {}
        for s_i, s in enumerate(source.sessions):
            for it in s.items:
                parents = [p for p in it.parents if p in known] if source.mode == "dependent" else []
                if not parents:
                    self.roots.setdefault(s_i, []).append(it)
                    continue
                self.waiting_parents[it.index] = len(parents)
                for p in parents:
                    self.children.setdefault(p, []).append(it)

    # -- building requests ----------------------------------------------------------------------

    def build(self, item: ReplayItem, due_perf_ns: int, attempt: int = 0, slot_wait_ns: int = 0) -> Outgoing:
        messages, words = _item_prompt(item)
        if words is not None and self.word_tokens:
            tokens = word_ids(words)  # the words are the tokens; no need to split them again
        else:
            ids = self.source.tokenizer.ids
            tokens = array("q")
            for m in messages:
                tokens += ids(m.content)
        client = self.d.client
        identity = dataclasses.replace(
            item.identity,
            run_id=self.run.run_id,
            target=client.target,
            engine=client.profile.name,
            worker=self.worker,
        )
        if attempt:
            first_id = identity.request_id
            identity = dataclasses.replace(
                identity, request_id=retry_request_id(first_id, attempt), attempt=attempt, retry_of=first_id
            )
        request = EngineRequest(
            messages=messages,
            max_tokens=item.max_tokens,
            identity=identity,
            slot_wait_ns=slot_wait_ns,
            scheduled_ns=self.d.wall_at(due_perf_ns),
            prompt_tokens_est=len(tokens),
            block_hashes=block_hashes(tokens),
            keep_text=item.prompt_parts is not None and self.run.keep_text,
            prompt_ids=tokens if self.word_tokens and client.reads_token_ids else None,
        )
        return Outgoing(request, tokens, client.encode(request))

    def _session_key(self, s_i: int) -> str:
        return self.source.sessions[s_i].key

    # -- schedule -------------------------------------------------------------------------------

    def finish(self) -> None:
        """After the run: sessions begun but not ended were cut by its stop."""
        for s_i, started in enumerate(self.started):
            if started and not self.ended[s_i]:
                self.ended[s_i] = True
                self.d.session_ended(cut=True, session_id=self._session_key(s_i))

    @property
    def schedule(self) -> list[Scheduled]:
        sessions = self.source.sessions
        if self.source.max_sessions > 0:  # closed loop: sessions start as others end
            return [Scheduled(0, self._session_pool)]
        entries: list[tuple[int, int, ReplayItem]] = []
        for s_i in range(len(sessions)):
            for it in self.roots.get(s_i, ()):
                entries.append((int(it.offset_s / self.speed * 1e9), it.index, it))
        entries.sort(key=lambda e: (e[0], e[1]))
        return [
            Scheduled(
                due_ns, self._fixed_runner(it), prepare=self._preparer(it), prepare_tokens=it.prompt_tokens
            )
            for due_ns, _, it in entries
        ]

    def _preparer(self, item: ReplayItem) -> Callable[[int], Outgoing]:
        return lambda due_ns: self.build(item, due_ns)

    def _fixed_runner(self, item: ReplayItem) -> Callable[[Outgoing | None, int], Coroutine[Any, Any, None]]:
        async def run(out: Outgoing | None, due_ns: int) -> None:
            await self._send(item, due_ns, out)

        return run

    async def _session_pool(self, _out: Outgoing | None, start_ns: int) -> None:
        pool = asyncio.Semaphore(self.source.max_sessions)
        first_s = min((s.first_offset_s for s in self.source.sessions), default=0.0)
        for s_i, s in enumerate(self.source.sessions):
            await pool.acquire()
            if self.d.stop.stopped:
                pool.release()
                break
            offset_ns = int((s.first_offset_s - first_s) / self.speed * 1e9)
            session_start_ns = max(self.d.clock_ns(), start_ns + offset_ns)
            await self.d.sleep_until(session_start_ns)
            self.d.spawn(self._closed_session(s_i, session_start_ns, pool))

    async def _closed_session(self, s_i: int, session_start_ns: int, pool: asyncio.Semaphore) -> None:
        session = self.source.sessions[s_i]
        done = self._done_events[s_i] = asyncio.Event()
        base_s = session.first_offset_s
        for it in self.roots.get(s_i, ()):
            due_ns = session_start_ns + int((it.offset_s - base_s) / self.speed * 1e9)
            self.d.spawn(self._send(it, due_ns, None))
        try:
            await done.wait()
        finally:
            pool.release()

    # -- sending --------------------------------------------------------------------------------

    async def _send(self, item: ReplayItem, due_ns: int, out: Outgoing | None) -> None:
        """Send ``item`` at ``due_ns`` (built now unless ``out`` was built ahead), with the
        source's retries; whatever happens, the item counts as finished (its children go on)."""
        s_i = self.session_of[item.index]
        sent = False
        try:
            if out is None:
                out = self.build(item, due_ns)
            await self.d.sleep_until(due_ns, precise=True)
            record, _ = await self.d.send_retrying(
                functools.partial(self._attempt, item), due_ns, retries=self.source.retry.retries,
                backoff_s=self.source.retry.backoff_s, first=out,
            )  # fmt: skip
            if record is not None and not self.started[s_i]:  # a session starts with its first send
                self.started[s_i] = True
                self.d.session_started()
            sent = record is not None and record.status is not Status.CANCELLED
        finally:
            self._finished(item, sent)

    async def _send_dependent(self, item: ReplayItem) -> None:
        parent_end_ns = max(
            (self.end_perf_ns[p] for p in item.parents if p in self.end_perf_ns), default=self.d.start_perf_ns
        )
        await self._send(item, parent_end_ns + int(item.gap_s / self.speed * 1e9), None)

    def _attempt(self, item: ReplayItem, attempt: int, due_ns: int, slot_wait_ns: int) -> Outgoing:
        return self.build(item, due_ns, attempt, slot_wait_ns)

    def _finished(self, item: ReplayItem, sent: bool) -> None:
        self.end_perf_ns[item.index] = self.d.clock_ns()
        s_i = self.session_of[item.index]
        if not sent:
            self.cut[s_i] = True
        for child in self.children.pop(item.index, ()):
            self.waiting_parents[child.index] -= 1
            if self.waiting_parents[child.index] == 0:
                if self.d.stop.stopped:
                    self._finished(child, False)  # never sent: the run stopped
                else:
                    self.d.spawn(self._send_dependent(child))
        self.remaining[s_i] -= 1
        if self.remaining[s_i] == 0:
            if self.started[s_i] and not self.ended[s_i]:
                self.ended[s_i] = True
                self.d.session_ended(self.cut[s_i], session_id=self._session_key(s_i))
            if (event := self._done_events.get(s_i)) is not None:
                event.set()
