"""The emulated showdown: what ``swarm run`` and ``swarm sweep`` send when told nothing.

Place in the map (docs/architecture.md, "Workload"): plain data, read by the CLI's ``run`` and
``sweep`` commands when neither a spec file nor a target is given (the embedded emulators in
their SGLang and TensorRT-LLM profiles). A flag given writes over it (``--agents 10`` keeps the
rest); ``--profile`` or ``--topology`` replaces its mix with the one entry they name.

Its traffic is two built-ins held against real references (docs/realism.md):

- ``tree_of_thought``: the Tree-of-Thought workload of TensorRT-LLM's agent study (tech blog 27,
  Table 1): expand, score and prune parallel branches, each call's prompt rendered afresh
  (median input 1.7k, output 985 tokens, 28.8 % optimal hit per trace);
- ``claude_code``: fitted from the 17 recorded Claude Code sessions (prompts of 15k to 150k
  tokens, growing by about 1k a turn, seconds to minutes between calls, compaction near 149k).

Claude Code sessions last tens of minutes to hours (their median call waits 11 s after the
previous one), so the showdown starts each of them at a sampled point of its life
(the mix entry's ``start_at: mid``: a warm-up call each, re-sending its history; trees of
thought, which end within a minute and prune by beams, start whole) and measures a window of ``SHOWDOWN_DURATION_S``
per target: steady state from the first seconds, with the sessions' histories in the cache.
"""

from __future__ import annotations

from typing import Any

#: agents of each kind: three trees of thought to every Claude Code session
SHOWDOWN_MIX: list[dict[str, Any]] = [
    {"profile": "tree_of_thought", "weight": 3},
    {"profile": "claude_code", "weight": 1, "start_at": "mid"},
]
#: the workload (``WorkloadSpec`` fields) the showdown sets; the rest are the spec's defaults
SHOWDOWN_WORKLOAD: dict[str, Any] = {
    "agents": 20,
    "system_prompts": 1,
    "mix": SHOWDOWN_MIX,
    "arrival": {"process": "poisson", "rate": 4.0},
}
#: seconds each target is measured (``--duration``): Claude Code sessions outlast any demo
SHOWDOWN_DURATION_S = 20.0


def showdown_workload(given: dict[str, Any]) -> dict[str, Any]:
    """The showdown's workload with the given workload fields (``--agents``, ``--arrival``, ...)
    written over it."""
    return {**SHOWDOWN_WORKLOAD, **given}
