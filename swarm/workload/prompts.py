"""A node's prompt: the chat messages an agent sends for it, from its plan and its ancestors.

Place in the map (docs/architecture.md, "Workload"): pure functions of an AgentPlan, shared by the
agent program (``runtime.agent``, which walks a topology live) and by the replay of a
``context: synthetic`` run (``replay.from_run``, which rebuilds the exact prompts from the run's
spec and seed). A prompt is the system prompt; the task (the agent's, or inside a spawned
sub-agent, the spawn node's own); for each alive context ancestor in topological order its
instruction (user), its output (assistant) and, after a tool call, the tool result (user);
then the node's own instruction (user). A profile's options change it: reasoning left out of
later prompts, compaction (history replaced by a summary past a threshold), and sub-agents
with a system prompt of their own (``agents/*.yaml``: ``reasoning``, ``compaction``,
``subagent_system_prompt``).
"""

from __future__ import annotations

from swarm.request import ChatMessage
from swarm.texts import Text, WordText
from swarm.workload.agent_profile import ReasoningSpec
from swarm.workload.tokenizer import counted_by_words
from swarm.workload.workload import AgentPlan

#: a node's turn in later prompts: its instruction, its output, and its tool result when a tool
#: ran after it (a tuple: a session holds one a node, 16 bytes less than a list's)
Turn = tuple[Text, ...]


def compose_messages(
    plan: AgentPlan, node: str, turns: list[tuple[str, Turn]]
) -> tuple[ChatMessage, ...]:
    """The chat messages of ``node``: system prompt, task, each ancestor's turn (instruction,
    output, and a tool result if any) in the order given, then the node's instruction.

    The profile's options shape it: ``reasoning`` strips the reasoning from the outputs of
    earlier turns (all, or all but the node's direct context parents'); ``compaction`` sends a
    prompt past its threshold with the history replaced by the node's summary, and later
    prompts start from the latest compacted ancestor (its summary, then the turns from it on);
    a spawned sub-agent's prompts carry ``subagent_system_prompt``. Compaction decisions are
    kept on the plan, taken when a node's prompt is first composed."""
    head = _head(plan, node)
    if plan.topology.fresh_context(node):
        turns = []
    if plan.profile.compaction is not None:
        turns = _since_compaction(plan, turns)
    own = ChatMessage("user", plan.node(node).instruction)
    compaction = plan.profile.compaction
    if compaction is not None:
        if node not in plan.compacted:
            _decide(plan, node, head, turns, own)
        if plan.compacted[node]:
            return (*head, ChatMessage("user", plan.summary(node)), own)
    return (*head, *_history(plan, node, turns), own)


def decide_compaction(plan: AgentPlan, node: str, ancestors: list[str]) -> None:
    """``node``'s compaction decision, as ``compose_messages`` of its synthetic turns takes it,
    without making its messages: the turns since the latest compaction are read by their
    memoised token counts (a mid-life session decides each of its hundred turns in order:
    composing each turn's whole prompt for it was a twelfth of a simulation). A node whose one
    context parent was the last decided here, with the parent's ancestry and the parent as its
    own, starts from the parent's window (``AgentPlan.compaction_window``): a chain of turns is
    decided in one pass, not a pass over its history per turn (a tenth of a simulation)."""
    compaction = plan.profile.compaction
    if compaction is None or node in plan.compacted:
        return
    t = plan.topology
    whole = ancestors == t.context_ancestors(node)  # the window through it is its child's to use
    fresh = t.fresh_context(node)
    parents = t.context_parents(node)
    window = plan.compaction_window
    own = ChatMessage("user", plan.node(node).instruction)
    head = _head(plan, node)
    # its whole ancestry with one context parent: the parent's ancestry and the parent
    if whole and not fresh and len(parents) == 1 and window is not None and window[0] == parents[0]:
        parent = parents[0]
        count = plan.token_count
        turn = synthetic_turn(plan, parent)
        since = window[1] - _turn_tokens(plan, parent, turn, direct=False) + _turn_tokens(plan, parent, turn, direct=True)
        length = sum(count(m.content) for m in head) + count(own.content) + since
        plan.compacted[node] = length > compaction.threshold_tokens
        behind = window[1]
    else:
        turns = _since_compaction(plan, [] if fresh else [(a, synthetic_turn(plan, a)) for a in ancestors])
        _decide(plan, node, head, turns, own)
        behind = sum(_turn_tokens(plan, name, turn, direct=False) for name, turn in turns) if whole else -1
    if whole and not fresh:
        # its child's window: its turn alone once compacted (the summary, then the turn)
        mine = _turn_tokens(plan, node, synthetic_turn(plan, node), direct=False)
        plan.compaction_window = (node, mine if plan.compacted[node] else behind + mine)
    elif whole:  # a fresh prompt's history is not its children's: no window to carry
        plan.compaction_window = None


def _turn_tokens(plan: AgentPlan, name: str, turn: Turn, direct: bool) -> int:
    """The tokens node ``name``'s ``turn`` adds to a later prompt: its summary if it was
    compacted, its instruction, its output (less the reasoning where the profile strips it,
    from a ``direct`` context parent's turn or not) and its tool result."""
    count = plan.token_count
    n = count(plan.summary(name)) if plan.compacted.get(name) else 0
    reasoning = plan.profile.reasoning
    if reasoning is not None and _strips(reasoning, direct):
        n += _visible_tokens(plan, turn[1], reasoning.share)
    else:
        n += count(turn[1])
    return n + count(turn[0]) + (count(turn[2]) if len(turn) > 2 else 0)


def _decide(
    plan: AgentPlan, node: str, head: list[ChatMessage], turns: list[tuple[str, Turn]], own: ChatMessage
) -> None:
    """Compacted when the prompt of ``head``, ``turns`` (those since the latest compaction)
    and ``own`` passes the profile's threshold: the token counts of the messages
    ``_history`` makes of them, each text counted once (``AgentPlan.token_count``)."""
    compaction = plan.profile.compaction
    assert compaction is not None
    count = plan.token_count
    direct = set(plan.topology.context_parents(node))
    length = sum(count(m.content) for m in head) + count(own.content)
    length += sum(_turn_tokens(plan, name, turn, name in direct) for name, turn in turns)
    plan.compacted[node] = length > compaction.threshold_tokens


def _visible_tokens(plan: AgentPlan, output: Text, reasoning_share: float) -> int:
    """``plan.token_count(visible_part(output, reasoning_share))``: a ``WordText``'s under word
    tokens counted from its words (nothing kept), another memoised on the plan by ``output`` (a
    plan has one reasoning share)."""
    if type(output) is WordText and counted_by_words(output, plan.tokenizer):
        return output.words - _reasoning_cut(output.words, reasoning_share)
    n = plan.visible_token_counts.get(output)
    if n is None:
        n = plan.visible_token_counts[output] = plan.token_count(visible_part(output, reasoning_share))
    return n


def _head(plan: AgentPlan, node: str) -> list[ChatMessage]:
    """A prompt's system prompt and task (a spawned sub-agent's own where it is inside one)."""
    spawn = spawn_of(plan, node)
    system = plan.system_prompt
    if spawn is not None and plan.subagent_system_prompt is not None:
        system = plan.subagent_system_prompt
    task = (plan.node(spawn).task or plan.task) if spawn is not None else plan.task
    return [ChatMessage("system", system), ChatMessage("user", task)]


def _since_compaction(plan: AgentPlan, turns: list[tuple[str, Turn]]) -> list[tuple[str, Turn]]:
    """The turns from the latest compacted one on (all when none was compacted). An ancestor
    whose decision is not known yet (read out of order) is decided from the turns before it."""
    for i in range(len(turns) - 1, -1, -1):
        name = turns[i][0]
        if name not in plan.compacted:
            ancestors = set(plan.topology.context_ancestors(name))
            compose_messages(plan, name, [t for t in turns[:i] if t[0] in ancestors])
        if plan.compacted[name]:
            return turns[i:]
    return turns


def _history(plan: AgentPlan, node: str, turns: list[tuple[str, Turn]]) -> list[ChatMessage]:
    """Each turn as messages; a compacted turn's summary before it; reasoning stripped as the
    profile says."""
    direct = set(plan.topology.context_parents(node))
    out: list[ChatMessage] = []
    for name, turn in turns:
        if plan.compacted.get(name):
            out.append(ChatMessage("user", plan.summary(name)))
        _append_turn(plan, turn, name in direct, out)
    return out


def _append_turn(plan: AgentPlan, turn: Turn, direct: bool, out: list[ChatMessage]) -> None:
    """A turn's messages (its instruction, its output less the reasoning the profile strips
    from a ``direct`` context parent's turn or another's, its tool result), appended to ``out``."""
    reasoning = plan.profile.reasoning
    output = turn[1]
    if reasoning is not None and _strips(reasoning, direct):
        output = visible_part(output, reasoning.share)
    out.append(ChatMessage("user", turn[0]))
    out.append(ChatMessage("assistant", output))
    if len(turn) > 2:
        out.append(ChatMessage("user", turn[2]))


def extend_messages(
    plan: AgentPlan,
    node: str,
    parent_messages: tuple[ChatMessage, ...],
    parent_turn: Turn,
    history_messages: int,
) -> tuple[ChatMessage, ...] | None:
    """``compose_messages`` of ``node`` with every context ancestor alive, made from its one
    context parent's messages (``parent_messages``, composed with every one of the parent's
    context ancestors, which make ``history_messages`` messages: the caller knows both) and the
    parent's turn, with no history composed anew; None where the two could differ: a profile
    that compacts, or strips reasoning from every turn but a direct parent's (the parent's own
    parent's output, whole in the parent's prompt, is not whole in its child's), a fresh context
    on either, another head (a sub-agent's), or a parent's prompt of another length or not
    ending with its turn's instruction. A chain's call composed its whole history anew: a tenth
    of the client's CPU a request in the anchors' chain of 16 calls."""
    profile, t = plan.profile, plan.topology
    reasoning = profile.reasoning
    if profile.compaction is not None:
        return None
    if reasoning is not None and _strips(reasoning, True) != _strips(reasoning, False):
        return None  # an earlier turn's output is not in the child's prompt as in its parent's
    parents = t.context_parents(node)
    if len(parents) != 1 or t.fresh_context(node) or t.fresh_context(parents[0]):
        return None
    head = _head(plan, node)
    if len(parent_messages) != len(head) + history_messages + 1:
        return None
    if parent_messages[-1] != ChatMessage("user", parent_turn[0]):
        return None
    if parent_messages[: len(head)] != tuple(head):
        return None
    out = list(parent_messages[:-1])  # its instruction is the first message of its turn
    _append_turn(plan, parent_turn, True, out)
    out.append(ChatMessage("user", plan.node(node).instruction))
    return tuple(out)


def _strips(reasoning: ReasoningSpec, direct_parent: bool) -> bool:
    """Whether a turn's reasoning is left out of a later prompt."""
    if reasoning.share == 0 or reasoning.carried == "all":
        return False
    return not (reasoning.carried == "last" and direct_parent)


def visible_part(output: Text, reasoning_share: float) -> Text:
    """An output less its leading reasoning: the words after the first ``reasoning_share`` of
    them (at least the last word, so the assistant turn is never empty); a ``WordText``'s
    without making its characters."""
    if isinstance(output, WordText):
        return output.words_from(_reasoning_cut(output.words, reasoning_share))
    words = output.split(" ")
    cut = _reasoning_cut(len(words), reasoning_share)
    return " ".join(words[cut:]) if cut > 0 else output


def _reasoning_cut(words: int, reasoning_share: float) -> int:
    """How many leading words of an output of ``words`` are its reasoning (``visible_part``)."""
    return min(words - 1, int(words * reasoning_share))


def spawn_of(plan: AgentPlan, node: str) -> str | None:
    """The nearest spawn node among the node and its context ancestors (a sub-agent started
    fresh), or None."""
    t = plan.topology
    if not t.spawns:
        return None
    for n in (node, *reversed(t.context_ancestors(node))):
        if n in t.spawns:
            return n
    return None


def synthetic_turn(plan: AgentPlan, node: str) -> Turn:
    """A node's turn with ``context: synthetic``: its instruction, its stand-in output, and its
    tool result when a tool runs after it."""
    np_ = plan.node(node)
    if np_.tool_result is not None:
        return (np_.instruction, np_.standin, np_.tool_result)
    return (np_.instruction, np_.standin)
