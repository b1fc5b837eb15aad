"""Agent programs: one topology instance walked against one engine.

Place in the map (docs/architecture.md, "Runtime"): an ``AgentRun`` issues a node when its
dependencies are resolved (context parents, ``after`` parents, and the beam group it waits
for), runs sibling branches concurrently as asyncio tasks, sleeps the node's think time
before a call and its tool time after one, and feeds each parent's output into its children:
the engine's real output (``context: live``) or the Workload's stand-in
(``context: synthetic``).

Node states: ``done`` (answered, alive), ``cut`` (answered, but its branch ends: beam not
kept, or early stop), ``failed`` (the request failed, after any retries the workload allows:
the branch is aborted; with ``on_failure: standin`` the node counts as answered with its
stand-in output instead, so the tree keeps its shape), ``pruned`` (never
sent, because every context parent is dead), ``skipped`` (never sent, because the run
stopped: duration, request limit, interrupt). A node with several context parents runs while
at least one is alive, with the dead ones left out of its prompt.

A prompt is, as chat messages: the system prompt; the task; for each alive context ancestor in
topological order its instruction (user), its output (assistant) and, after a tool call, the
tool result (user); then the node's own instruction (user).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from array import array
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarm.record import RequestIdentity, Status
from swarm.request import ChatMessage, EngineRequest
from swarm.runtime.dispatcher import DISPATCH_SPIN_NS, Dispatcher, Outgoing
from swarm.runtime.retry import retry_request_id
from swarm.runtime.session_prompts import SessionPrompts
from swarm.texts import Text
from swarm.workload.prefix import BLOCK_TOKENS, BlockHashes, block_hashes
from swarm.workload.prompts import Turn, compose_messages, decide_compaction, extend_messages, synthetic_turn
from swarm.workload.tokenizer import TokenIds, Tokenizer, WordTokenizer
from swarm.workload.workload import AgentPlan, NodePlan

log = logging.getLogger(__name__)

ALIVE = "done"
DEAD = frozenset({"cut", "failed", "pruned", "skipped"})

#: a prompt built ahead: messages, tokens, block hashes, and its encoded body (None: encoded
#: at the send)
_Built = tuple[tuple[ChatMessage, ...], TokenIds, BlockHashes, bytes | None]
_NO_IDENTITY = RequestIdentity()


#: a history part longer than this (characters) is tokenized a slice at a time when built ahead
LONG_PART_CHARS = 100_000
#: a warm-up prompt's block hashes built ahead this many blocks a step
HASH_BLOCKS_PER_STEP = 256
#: prompts built while their parent is in flight (``_speculate``): at most this many prompt
#: tokens held at once by one target's agents in one process (32 MB of token references, and
#: about as much again of encoded bodies); past it, a prompt is built when it is due
SPECULATED_TOKENS_BUDGET = 4_000_000
#: a node's children are built while it is in flight (``_speculate``) only when their prompts,
#: one after another, come to about this many tokens or more (``_children_tokens``); after a
#: warm-up (a history) always. Fewer are built at its answer in a tenth to a fifth of a
#: millisecond (a prompt's build measured here at 52 us under 200 tokens and 106 us at
#: 1,000-1,200, the anchors' chain, p50), while building them ahead (a task, a wait and four
#: turns of the loop per node) was a tenth of the client's CPU per request in that chain
#: (0.51 -> 0.45-0.49 ms)
SPECULATE_FROM_TOKENS = 2_048


@dataclass
class AgentEnv:
    """What all agents of one target share."""

    #: sends every request (in-flight cap, stop conditions, records) and keeps the clocks
    dispatcher: Dispatcher
    tokenizer: Tokenizer
    context: str = "synthetic"
    stream: bool = True
    run_id: str = ""
    #: the target and engine every record names (the client's own: set here, each request's
    #: identity is made whole once instead of copied again by the client)
    target: str = ""
    engine: str = ""
    worker: int = 0
    #: the trace stores prompt parts and outputs (``--record-text``); with ``context: live``
    #: outputs are kept anyway (children read them). Otherwise a streamed answer is only
    #: counted, which is the client's fast path.
    record_text: bool = True
    #: retries of a failed call, and the backoff before the first (doubling after)
    retries: int = 0
    retry_backoff_s: float = 0.5
    #: abort_branch, or standin: a call that failed for good still feeds its stand-in output on
    on_failure: str = "abort_branch"
    #: tokens of each system prompt, shared by all agents (a swarm has a few system prompts)
    system_prompt_tokens: dict[Text, TokenIds] = field(default_factory=dict)
    #: the hashes of each system prompt's whole blocks: the first blocks of every prompt it
    #: leads (a Claude Code session's first prompt hashed its 15,261-token system prompt again)
    system_prompt_hashes: dict[Text, BlockHashes] = field(default_factory=dict)
    #: prompt tokens held now by prompts built ahead of their parent's answer (``_speculate``)
    speculated_tokens: int = 0


class AgentRun:
    """Runs one AgentPlan; ``await run(start_perf_ns)`` returns when every branch has ended."""

    # slots: a simulated swarm holds tens of thousands of runs (a dict of attributes each was
    # 240 bytes of an agent)
    __slots__ = (
        "_decided", "_deps", "_deps_at_start", "_gated", "_groups", "_idle", "_member_of",
        "_speculated", "_tasks", "_unsettled", "_warmups", "cancelled", "env", "plan", "prompts",
        "records", "state", "template", "turns",
    )  # fmt: skip

    def __init__(self, plan: AgentPlan, env: AgentEnv) -> None:
        self.plan = plan
        self.env = env
        t = plan.topology
        self.template = t
        self.state: dict[str, str] = {}
        self.turns: dict[str, Turn] = {}
        index = t.run_index()  # shared by every run of the template; only deps change
        #: each node's dependencies not yet answered, for the nodes one has answered for; the
        #: rest as the template's table (``_deps_of``), shared: a copy of the whole table was
        #: 1.6 KB an agent (72 MB of 100,000 simulated agents' 44,681 started)
        self._deps: dict[str, int] = {}
        self._deps_at_start = index.deps
        self._groups = index.groups
        self._member_of = index.member_of
        self._gated = index.gated
        #: each beam group's members not yet answered or dead (``_settle``): decided at 0
        self._unsettled: dict[str, int] = dict(index.members)
        self._decided: set[str] = set()
        #: warm-up calls built ahead: messages, tokens, block hashes, body
        self._warmups: dict[str, _Built] = {}
        #: its prompts' token ids, laid-out ids, shared runs and block hashes (a parent's kept
        #: for the nodes that extend it)
        self.prompts = SessionPrompts(env, t)
        #: prompts built while their last parent was in flight: the alive context ancestors
        #: they assumed, the compaction decision taken on that assumption (None: none taken),
        #: and the prompt with its body (``_speculate``)
        self._speculated: dict[str, tuple[tuple[str, ...], bool | None, _Built]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: set when the last task ends (made by ``run``): a future, not an ``asyncio.Event``,
        #: whose waiter deque alone was 0.76 KB an agent
        self._idle: asyncio.Future[None] | None = None
        self.records = 0
        self.cancelled = False

    async def run(
        self,
        start_perf_ns: int,
        on_start: Callable[[], object] | None = None,
        on_end: Callable[[AgentRun], object] | None = None,
    ) -> None:
        """Run the plan from ``start_perf_ns``: ``on_start()`` as it starts and ``on_end(self)``
        once it has ended, however it ended (the source's count of sessions, with no coroutine
        of its own around this one)."""
        if on_start is not None:
            on_start()
        warm = self._enter_history() if self.plan.history else []
        roots = [n for n in self.template.order if self._deps_of(n) == 0 and n not in self.state]
        for n in roots:
            self._launch(n, start_perf_ns)
        for n in warm:
            self._spawn(self._warm_up(n, start_perf_ns))
        try:
            if self._tasks:
                self._idle = asyncio.get_running_loop().create_future()
                await self._idle
        except asyncio.CancelledError:
            # the run is stopping: cancel this agent's calls (the client records in-flight ones
            # as cancelled) and wait for them, so no request outlives its agent
            self.cancelled = True
            while self._tasks:
                for task in list(self._tasks):
                    task.cancel()
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
            raise
        finally:
            self.discard_ahead()  # children the run never launched
            if on_end is not None:
                on_end(self)

    @property
    def cut_short(self) -> bool:
        """Whether the run's stop (interrupt, halt, duration, request limit) ended this agent
        before its topology did: a call cancelled, or a node skipped."""
        return self.cancelled or "skipped" in self.state.values()

    # -- scheduling ----------------------------------------------------------------------------

    def _enter_history(self) -> list[str]:
        """A session started mid-life: its history nodes count as answered with their stand-in
        turns, unsent; the ones a later node extends are returned, to be re-sent once each as
        warm-up calls (one for a single thread) that resolve them; the others resolve now."""
        plan = self.plan
        warm = list(self._cut_threads())
        for n in plan.history:
            self._settle(n, ALIVE)
            self.turns[n] = synthetic_turn(plan, n)
        for n in plan.history:
            if n not in warm:
                self._resolve(n, ALIVE)
        return warm

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    async def _warm_up(self, node: str, start_perf_ns: int) -> None:
        """Re-send a history node's call (one output token, marked warm-up), so the engine
        holds the history the session starts with; then its tool time, then it resolves: the
        session goes on whatever the warm-up's outcome (its history stands either way)."""
        env, plan = self.env, self.plan
        d = env.dispatcher
        np_ = plan.node(node)
        await self._materialise(node)
        first_id = f"{plan.session_id}:{node}:warmup"
        # due once its history is built: the building is the session's preparation, not a late send
        due_perf_ns = max(start_perf_ns, d.clock_ns())
        if self._speculates(node):  # after a history: built ahead whatever their length
            self._spawn(self._speculate(node, due_perf_ns, asyncio.current_task()))  # type: ignore[arg-type]
        record, attempts = await d.send_retrying(
            functools.partial(self._build, node, np_, first_id, warmup=True), due_perf_ns, retries=0
        )
        self.records += attempts
        if record is None:
            self._resolve(node, "skipped")
            return
        if record.status is Status.CANCELLED:
            self.cancelled = True
            self._resolve(node, "failed")
            return
        if np_.tool_result is not None:
            await d.sleep_until(d.clock_ns() + int(np_.tool_s * 1e9))
        self._resolve(node, ALIVE)

    def prepare_history_steps(self) -> Iterator[None]:
        """Build a mid-life session's history (its texts, compaction decisions, tokens and
        warm-up prompts) a turn, a message or a warm-up prompt per step: the source's
        preparation, run ahead of the session's start by the Dispatcher's preparer, which lets
        the loop turn between steps (whole, 120 turns held it for 40-65 ms on a slow core)."""
        cut = self._cut_threads()
        composed: dict[str, tuple[ChatMessage, ...]] = {}
        yield from self._history_steps(cut, composed)
        for node in cut:  # the warm-ups themselves, but for their ideal (taken at send)
            messages = composed.pop(node)
            tokens = self.prompts.tokens(messages)
            yield
            hashes: BlockHashes = array("Q", self.prompts.system_blocks(messages))
            end = 0
            while end < len(tokens):  # a 150k-token prompt's hashes took 6-10 ms whole
                end = min(len(tokens), (len(hashes) + HASH_BLOCKS_PER_STEP) * BLOCK_TOKENS)
                hashes = block_hashes(tokens[:end], known=hashes)
                yield
            self._warmups[node] = (messages, tokens, hashes, self._body(messages, 1))
            yield

    def _cut_threads(self) -> tuple[str, ...]:
        """The history nodes a later node extends: one warm-up each."""
        plan, t = self.plan, self.template
        history = set(plan.history)
        return tuple(
            p for p in plan.history if any(c not in history and p in t.context_parents(c) for c in t.graph.successors(p))
        )

    async def _materialise(self, node: str) -> None:
        """Build what a warm-up of ``node`` needs that is not built yet, a turn at a time,
        yielding between them: a session started deep into its life (a hundred turns, 100k
        tokens) would otherwise hold the event loop for a tenth of a second, and every other
        agent's send and read with it. Nothing is left to do when ``prepare_history_steps`` ran
        (its warm-up is built: nothing is composed again)."""
        if node in self._warmups:
            return
        for _ in self._history_steps((node,)):
            await asyncio.sleep(0)

    def _history_steps(
        self, nodes: Sequence[str], composed: dict[str, tuple[ChatMessage, ...]] | None = None
    ) -> Iterator[None]:
        """The work of building the warm-up prompts of ``nodes`` (history nodes a later node
        extends), one turn or message per step; each prompt's messages put in ``composed``."""
        plan, t = self.plan, self.template
        compacts = plan.profile.compaction is not None
        for node in nodes:
            for n in (*t.context_ancestors(node), node):
                if plan.has_node(n) and (not compacts or n in plan.compacted):
                    continue  # built (its texts, and its compaction decision)
                plan.node(n)
                if compacts:  # its compaction decision, taken in order (each from those before it)
                    decide_compaction(plan, n, t.context_ancestors(n))
                yield
            messages = compose_messages(plan, node, [(a, synthetic_turn(plan, a)) for a in t.context_ancestors(node)])
            if composed is not None:
                composed[node] = messages
            for message in messages:
                if not self.prompts.has_part(message.content) and not self.prompts.sliced(message):
                    yield from self._part_steps(message)

    def _part_steps(self, message: ChatMessage) -> Iterator[None]:
        """One history part's tokens, cached; a long part a slice of words per step (a
        100k-word tool result took 19 ms whole on a slow core)."""
        tokenizer = self.env.tokenizer
        if message.role == "system" or len(message.content) < LONG_PART_CHARS or not isinstance(tokenizer, WordTokenizer):
            self.prompts.tokens((message,))
            yield
            return
        tokens: TokenIds = array("q")
        for piece in tokenizer.ids_in_steps(message.content):
            tokens += piece
            yield
        self.prompts.keep_part(message.content, tokens)

    def _launch(self, node: str, ready_perf_ns: int) -> None:
        if node in self.state and node in self.plan.history:  # answered before the session's start
            return
        parents = self.template.context_parents(node)
        if parents and all(self.state.get(p) != ALIVE for p in parents):
            self._take_speculated(node)
            self._resolve(node, "pruned")
            return
        if self.cancelled or self.env.dispatcher.stop.stopped:
            self._take_speculated(node)
            self._resolve(node, "skipped")
            return
        self.state[node] = "running"
        self._spawn(self._run_node(node, ready_perf_ns))

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # a bug of ours: the node never resolves and its children never start; the run
            # stops with it as its reason, as the Dispatcher's own task failures do, rather
            # than go on with the session's rest silently missing from the trace
            log.error("agent %s: node task failed", self.plan.session_id, exc_info=exc)
            self.env.dispatcher.stop.halt(f"internal error in session {self.plan.session_id}: {exc!r}")
        if not self._tasks and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    def _settle(self, node: str, state: str) -> None:
        """Set ``node``'s state; the first time it is answered or dead, its beam groups count
        one member fewer still to come (a group decides at 0: no walk of its members at each
        answer, which was a twentieth of a simulation of trees of thought)."""
        before = self.state.get(node)
        self.state[node] = state
        if before != ALIVE and before not in DEAD and (state == ALIVE or state in DEAD):
            for group in self._member_of.get(node, ()):
                self._unsettled[group] -= 1

    def _resolve(self, node: str, state: str) -> None:
        self._settle(node, state)
        now = self.env.dispatcher.clock_ns()
        g = self.template.graph
        for child in g.successors(node):
            self._dep_done(child, now)
        for group in self._member_of.get(node, ()):
            self._maybe_decide(group, now)

    def _deps_of(self, node: str) -> int:
        """How many of ``node``'s dependencies are still to answer."""
        left = self._deps.get(node)
        return self._deps_at_start[node] if left is None else left

    def _dep_done(self, node: str, now: int) -> None:
        left = self._deps[node] = self._deps_of(node) - 1
        if left == 0:
            self._launch(node, now)

    def _maybe_decide(self, name: str, now: int) -> None:
        group = self._groups[name]
        if name in self._decided:
            return
        if self._unsettled[name]:  # a member still to answer
            return
        self._decided.add(name)
        alive = [c for c in group.candidates if self.state.get(c) == ALIVE]
        alive.sort(key=lambda c: self.plan.node(c).score, reverse=True)
        for c in alive[group.keep :]:
            self.state[c] = "cut"
        for n in self._gated.get(name, ()):
            self._dep_done(n, now)

    # -- one call ------------------------------------------------------------------------------

    def messages(self, node: str) -> tuple[ChatMessage, ...]:
        ancestors = self._alive_ancestors(node)
        extended = self._extended_messages(node, ancestors)
        if extended is not None:
            return extended
        return compose_messages(self.plan, node, [(anc, self.turns[anc]) for anc in ancestors])

    def _extended_messages(self, node: str, ancestors: list[str]) -> tuple[ChatMessage, ...] | None:
        """``node``'s messages as its one context parent's prompt, still kept for the nodes
        that extend it (``SessionPrompts.kept_messages``), then the parent's turn and its own instruction
        (``prompts.extend_messages``), where each of its context ancestors is alive: as a node
        lost is never alive again, the parent's were alive when its prompt was composed (a
        prompt built ahead is kept only where the ancestors it assumed were), and the count of
        messages checked there says so; None where not."""
        t = self.template
        parents = t.context_parents(node)
        if len(parents) != 1 or not ancestors or ancestors[-1] != parents[0]:
            return None
        if len(ancestors) != len(t.context_ancestors(node)):  # one lost or pruned
            return None
        kept = self.prompts.kept_messages(parents[0])
        turns = self.turns
        if kept is None or parents[0] not in turns:
            return None
        try:
            history = sum(map(len, map(turns.__getitem__, ancestors[:-1])))  # a turn's messages: its parts
        except KeyError:  # a turn not known here
            return None
        return extend_messages(self.plan, node, kept, turns[parents[0]], history)

    def _alive_ancestors(self, node: str, assume_alive: str | None = None) -> list[str]:
        """``node``'s context ancestors whose turns its prompt carries: those reached from it
        through alive context parents only (``assume_alive`` counted alive), in topological order."""
        t = self.template
        state = self.state
        every = t.context_ancestors(node)
        if list(map(state.get, every)).count(ALIVE) == len(every):  # the usual case: none lost or pruned
            return every

        def alive(p: str) -> bool:
            return p == assume_alive or state.get(p) == ALIVE

        seen: set[str] = set()
        stack = [p for p in t.context_parents(node) if alive(p)]
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                stack.extend(p for p in t.context_parents(n) if alive(p))
        return [n for n in t.order if n in seen]

    async def _run_node(self, node: str, ready_perf_ns: int) -> None:
        env, plan = self.env, self.plan
        d = env.dispatcher
        np_ = plan.node(node)
        due_perf_ns = ready_perf_ns + int(np_.think_s * 1e9)
        first_id = f"{plan.session_id}:{node}"
        expected_tokens = self.prompts.expected_tokens(node)
        if self._speculates(node) and not np_.early_stop and self._children_tokens(node, np_, expected_tokens) >= SPECULATE_FROM_TOKENS:
            self._spawn(self._speculate(node, due_perf_ns, asyncio.current_task()))  # type: ignore[arg-type]
        record, attempts = await d.send_on_time(
            functools.partial(self._build, node, np_, first_id),
            due_perf_ns,
            expected_tokens=expected_tokens,
            retries=env.retries,
            backoff_s=env.retry_backoff_s,
        )
        self.records += attempts
        if record is None:  # the run no longer sends
            # before the first attempt the node was skipped; before a retry it failed
            self._resolve(node, "skipped" if attempts == 0 else "failed")
            return
        if record.status is Status.CANCELLED:
            self.cancelled = True
            self._resolve(node, "failed")
            return
        if not record.ok and env.on_failure != "standin":
            self._resolve(node, "failed")
            return
        turn = synthetic_turn(plan, node)
        if env.context == "live" and record.ok:
            turn = (turn[0], record.output_text or "", *turn[2:])
        if np_.tool_result is not None:
            await d.sleep_until(d.clock_ns() + int(np_.tool_s * 1e9))
        self.turns[node] = turn
        self._resolve(node, "cut" if np_.early_stop else ALIVE)

    async def _speculate(self, parent: str, parent_due_perf_ns: int, parent_task: asyncio.Task[Any]) -> None:
        """Build the prompts of ``parent``'s children that wait for it alone and would be due
        too soon after its answer to be built ahead (``send_on_time``), while ``parent`` is
        in flight, assuming it answers (with ``context: synthetic`` its turn is known ahead).
        Built once its answer came, a child's prompt is milliseconds of lag, and a fan-out's
        siblings are built one after another (the third waited for two). A child checks the
        assumption when it is built (``_take_speculated``). Starts once ``parent`` is due (and,
        a slot free, sent); the loop turns between the parts of a child's build; within
        ``SPECULATED_TOKENS_BUDGET``."""
        env, plan, t = self.env, self.plan, self.template
        d = env.dispatcher
        await d.sleep_until(parent_due_perf_ns)
        await asyncio.sleep(0)  # the parent's send goes first
        parent_tokens = self.prompts.expected_tokens_of(parent)
        lead_ns = d.build_cost.estimate_ns(parent_tokens) + 2 * DISPATCH_SPIN_NS
        for child in t.graph.successors(parent):
            if not self._may_speculate(parent_task, parent, child):
                continue  # launched, built already, waiting for others too, or not extending it
            if plan.node(child).think_s * 1e9 >= lead_ns:
                continue  # built ahead of its own instant anyway
            if env.speculated_tokens + parent_tokens > SPECULATED_TOKENS_BUDGET or d.stop.stopped:
                return
            alive = tuple(self._alive_ancestors(child, assume_alive=parent))
            turns = [(a, synthetic_turn(plan, a) if a == parent else self.turns[a]) for a in alive]
            decided = child in plan.compacted
            messages = compose_messages(plan, child, turns)
            # a compaction decision is taken once, from the prompt's length: taken on an
            # assumption, it is put back only if the assumption holds (``_take_speculated``)
            compacted = None if decided else plan.compacted.pop(child, None)
            tokens = self.prompts.tokens(messages)
            await asyncio.sleep(0)
            if not self._may_speculate(parent_task, parent, child) or env.speculated_tokens + len(tokens) > SPECULATED_TOKENS_BUDGET:
                continue
            hashes = block_hashes(tokens, known=self.prompts.known_blocks(child, messages))
            await asyncio.sleep(0)
            body = self._body(messages, plan.node(child).max_tokens)
            if not self._may_speculate(parent_task, parent, child):
                continue
            self._speculated[child] = (alive, compacted, (messages, tokens, hashes, body))
            env.speculated_tokens += len(tokens)
            await asyncio.sleep(0)

    def _speculates(self, node: str) -> bool:
        """Whether ``node``'s children may be built while it is in flight (a real clock,
        ``context: synthetic``, and it has children)."""
        env = self.env
        return env.context == "synthetic" and env.dispatcher.precise_release and self.template.graph.out_degree(node) > 0

    def _children_tokens(self, node: str, np_: NodePlan, parent_tokens: int) -> int:
        """About how many prompt tokens ``node``'s children would be built from, one after
        another: for each child that extends ``node`` alone, ``node``'s own prompt (at least
        ``parent_tokens``, its context parents' longest, or its system prompt and task), its
        instruction, answer and tool result. Memoised counts: a few dict lookups."""
        t, plan = self.template, self.plan
        extenders = sum(
            1 for c in t.graph.successors(node) if self._deps_of(c) == 1 and node in t.context_parents(c)
        )
        if not extenders:
            return 0
        count = plan.token_count
        own = max(parent_tokens, count(plan.system_prompt) + count(plan.task)) + count(np_.instruction)
        turn = np_.max_tokens + (count(np_.tool_result) if np_.tool_result is not None else 0)
        return extenders * (own + turn)

    def _may_speculate(self, parent_task: asyncio.Task[Any], parent: str, child: str) -> bool:
        """``child`` not launched nor built ahead, and ``parent`` (its task not ended: a node
        resolves, launching its children, as its task ends) the last dependency it waits
        for, whose turn its prompt extends."""
        return (
            not parent_task.done()
            and child not in self.state
            and child not in self._speculated
            and self._deps_of(child) == 1
            and parent in self.template.context_parents(child)
        )

    def prepare_root_steps(self) -> Iterator[None]:
        """Build the prompts of the session's first calls (its roots) ahead of its start, a
        root a step (the Dispatcher's preparer runs them), within ``SPECULATED_TOKENS_BUDGET``:
        built at the start, they were the latest sends of a run (2.8-6.4 ms late)."""
        env = self.env
        if env.context != "synthetic" or not env.dispatcher.precise_release:
            return
        for root in self.template.order:
            if self._deps_of(root) != 0 or root in self.state or root in self._speculated:
                continue
            messages = self.messages(root)
            tokens = self.prompts.tokens(messages)
            if env.speculated_tokens + len(tokens) > SPECULATED_TOKENS_BUDGET:
                return
            yield
            hashes = block_hashes(tokens, known=self.prompts.system_blocks(messages))
            yield
            body = self._body(messages, self.plan.node(root).max_tokens)
            self._speculated[root] = ((), None, (messages, tokens, hashes, body))
            env.speculated_tokens += len(tokens)
            yield

    def discard_ahead(self) -> None:
        """Let go of every prompt built ahead (a prepared session that will not run)."""
        for node in list(self._speculated):
            self._take_speculated(node)

    def _take_speculated(self, node: str) -> _Built | None:
        """``node``'s prompt built while its parent was in flight, if its alive context
        ancestors are the ones it assumed (a beam may have cut one since); its tokens are no
        longer counted against the budget either way."""
        built = self._speculated.pop(node, None)
        if built is None:
            return None
        alive, compacted, prompt = built
        self.env.speculated_tokens -= len(prompt[1])
        if tuple(self._alive_ancestors(node)) != alive:
            return None
        if compacted is not None:
            self.plan.compacted[node] = compacted
        return prompt

    def _body(self, messages: tuple[ChatMessage, ...], max_tokens: int) -> bytes | None:
        """A call's encoded body, ahead of its send (a 130k-token prompt's JSON takes
        milliseconds): what the client encodes from the request ``_build`` makes, whose body
        fields are its messages, ``max_tokens`` and ``stream`` (no identity). None on a
        virtual clock (the twin reads the request)."""
        env = self.env
        if not env.dispatcher.precise_release:
            return None
        request = EngineRequest(messages=messages, max_tokens=max_tokens, identity=_NO_IDENTITY, stream=env.stream)
        return env.dispatcher.client.encode(request)

    def _build(
        self, node: str, np_: NodePlan, first_id: str, attempt: int, due_perf_ns: int, slot_wait_ns: int,
        *, warmup: bool = False, ahead: bool = False,
    ) -> Outgoing:  # fmt: skip
        """One attempt at a node's call, built once a slot is free (its ideal reuse is taken
        now, in send order), or ``ahead`` of its instant (the ideal is then taken at the send,
        from the Outgoing's tokens); a warm-up call asks for one output token."""
        env, plan = self.env, self.plan
        d = env.dispatcher
        if warmup:
            built = self._warmups.pop(node, None)
        else:
            built = self._take_speculated(node) if attempt == 0 else None
        body: bytes | None = None
        if built is not None:  # prepared ahead (``prepare_history_steps``, ``_speculate``)
            messages, tokens, hashes, body = built
        else:
            messages = self.messages(node)
            tokens = self.prompts.tokens(messages)
            hashes = block_hashes(tokens, known=self.prompts.known_blocks(node, messages))
        if attempt == 0:  # a retry builds the same prompt again
            self.prompts.remember_blocks(node, messages, len(tokens), hashes)
        prompt_tokens_est = len(tokens)
        shared = self.prompts.shared_runs(messages, prompt_tokens_est)
        ideal = 0 if ahead else d.index.observe(tokens, shared)
        kept = tokens if ahead else None  # the Dispatcher takes them out at the send
        # a twin reads the ids in place of the text (it would hold its own copy in flight), laid
        # out: made into one array when the twin admits the request, not while it waits
        reads_ids = d.client.reads_token_ids and isinstance(env.tokenizer, WordTokenizer)
        given = self.prompts.laid_out(messages, tokens) if reads_ids else None
        del tokens  # else not held while the request is in flight (thousands of agents)
        parents = tuple(p for p in self.template.context_parents(node) if self.state.get(p) == ALIVE)
        # the body's fields (messages, max_tokens, stream) as ``_body`` encodes them ahead
        request = EngineRequest(
            messages=messages,
            max_tokens=1 if warmup else np_.max_tokens,
            identity=RequestIdentity(
                run_id=env.run_id,
                target=env.target,
                engine=env.engine,
                worker=env.worker,
                agent_id=plan.agent_id,
                profile=plan.profile.name,
                topology=self.template.name,
                session_id=plan.session_id,
                node=node,
                parent_nodes=parents,
                depth=np_.depth,
                branch=np_.branch,
                role=np_.role,
                system_prompt_id=plan.system_prompt_id,
                request_id=retry_request_id(first_id, attempt) if attempt else first_id,
                attempt=attempt,
                retry_of=first_id if attempt else None,
                warmup=warmup,
            ),
            scheduled_ns=d.wall_at(due_perf_ns),
            stream=env.stream,
            prompt_tokens_est=prompt_tokens_est,
            slot_wait_ns=slot_wait_ns,
            ideal_cached_tokens_est=ideal,
            block_hashes=hashes,
            keep_text=env.record_text or env.context == "live",
            prompt_ids=given,
            prompt_runs=tuple(shared) if given is not None and d.client.reads_prompt_runs else (),
        )
        return Outgoing(request, kept, body, shared if ahead else ())
