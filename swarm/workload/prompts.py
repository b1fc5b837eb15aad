"""A node's prompt: the chat messages an agent sends for it, from its plan and its ancestors.

Place in the map (docs/architecture.md, "Workload"): pure functions of an AgentPlan, shared by the
agent program (``runtime.agent``, which walks a topology live) and by the replay of a
``context: synthetic`` run (``replay.from_run``, which rebuilds the exact prompts from the run's
spec and seed). A prompt is the system prompt; the task (the agent's, or inside a spawned
sub-agent, the spawn node's own); for each alive context ancestor in topological order its
instruction (user), its output (assistant) and, after a tool call, the tool result (user);
then the node's own instruction (user).
"""

from __future__ import annotations

from swarm.request import ChatMessage
from swarm.workload.workload import AgentPlan


def compose_messages(
    plan: AgentPlan, node: str, turns: list[tuple[str, list[str]]]
) -> tuple[ChatMessage, ...]:
    """The chat messages of ``node``: system prompt, task, each ancestor's turn (instruction,
    output, and a tool result if any) in the order given, then the node's instruction."""
    out = [ChatMessage("system", plan.system_prompt), ChatMessage("user", task_of(plan, node))]
    for _, turn in turns:
        out.append(ChatMessage("user", turn[0]))
        out.append(ChatMessage("assistant", turn[1]))
        if len(turn) > 2:
            out.append(ChatMessage("user", turn[2]))
    out.append(ChatMessage("user", plan.node(node).instruction))
    return tuple(out)


def task_of(plan: AgentPlan, node: str) -> str:
    """The task a node's prompt carries: that of the nearest spawn node among the node and its
    context ancestors (a sub-agent started fresh), else the agent's."""
    t = plan.topology
    if not t.spawns:
        return plan.task
    for n in (node, *reversed(t.context_ancestors(node))):
        if n in t.spawns:
            return plan.node(n).task or plan.task
    return plan.task


def synthetic_turn(plan: AgentPlan, node: str) -> list[str]:
    """A node's turn with ``context: synthetic``: its instruction, its stand-in output, and its
    tool result when a tool runs after it."""
    np_ = plan.node(node)
    turn = [np_.instruction, np_.standin]
    if np_.tool_result is not None:
        turn.append(np_.tool_result)
    return turn
