"""The small swarm the real-engine tests send (llama.cpp and vLLM): a profile and a topology.

``tiny_reasoner``: a 300-word shared system prompt, 40-word tasks, 8-token outputs;
``tot_2x2``: a tree of thought of branching 2 and depth 2 with every thought kept (8 calls);
``LONG_TASK`` and ``CHAIN3``: the sweeps' agents (a long private task, three calls in a row).
"""

from __future__ import annotations

from pathlib import Path

PROFILE = """\
name: tiny_reasoner
description: a 300-token shared system prompt, short tasks, 8-token thoughts
system_prompt: {style: prose, tokens: 300}
task_tokens: {dist: constant, value: 40}
instruction_tokens: {dist: constant, value: 10}
output_tokens:
  default: {dist: constant, value: 8}
think_time_s: {dist: constant, value: 0}
"""

TOPOLOGY = """\
name: tot_2x2
description: tree of thought, branching 2, depth 2, every thought kept
generator: tree_of_thought
params: {branching: 2, depth: 2, evaluate: false, beam_width: 4}
"""

#: calls per agent of ``tot_2x2``: a plan, 2 + 4 thoughts and an answer
CALLS_PER_AGENT = 8

#: a short shared prompt and a long private task, so an agent's own context is most of what
#: its next call can reuse
LONG_TASK = """\
name: long_task
description: 60-token shared prompt, 200-token task, 8-token turns
system_prompt: {style: prose, tokens: 60}
task_tokens: {dist: constant, value: 200}
instruction_tokens: {dist: constant, value: 10}
output_tokens:
  default: {dist: constant, value: 8}
think_time_s: {dist: constant, value: 0}
"""

CHAIN3 = """\
name: chain3
description: three calls in sequence, each sees the turns before it
generator: chain
params: {length: 3}
"""


def write_spec_files(folder: Path) -> Path:
    """``tiny_reasoner.yaml`` and ``tot_2x2.yaml`` in ``folder``; returns it."""
    (folder / "tiny_reasoner.yaml").write_text(PROFILE)
    (folder / "tot_2x2.yaml").write_text(TOPOLOGY)
    return folder
