"""A seeded agentic-coding trace (the format of ``replay/agentic_coding_trace.py``) for tests of
``swarm fit`` and ``swarm realism``: conversations that share a system prompt, grow turn by
turn by the model's output plus a tool result, wait briefly between calls, and now and then
spawn two sub-agents that the next call waits for. Written by these tests, not recorded."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

BLOCK = 64
SYSTEM_BLOCKS = 6  # a 384-token shared system prompt


def _blocks(tokens: int) -> int:
    return max(1, round(tokens / BLOCK))


def write_agent_trace(
    folder: Path, conversations: int = 40, seed: int = 7, think_s: tuple[float, float] = (0.2, 0.8)
) -> Path:
    """``conversations`` JSON files in ``folder``, waits between calls drawn from ``think_s``;
    returns the folder."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    next_id = [1000]

    def fresh(n: int) -> list[int]:
        ids = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        return ids

    system = list(range(1, SYSTEM_BLOCKS + 1))
    for c in range(conversations):
        blocks = system + fresh(_blocks(rng.lognormvariate(6.0, 0.5)))  # the task: ~400 tokens
        requests: list[dict[str, Any]] = []
        t = 0.0
        for turn in range(rng.randint(3, 8)):
            out = max(8, round(rng.lognormvariate(4.5, 0.5)))  # ~90 tokens
            tail = rng.randrange(BLOCK)  # a partial last block: not a hash id
            requests.append(
                {"t": round(t, 3), "type": "n", "model": "m", "in": len(blocks) * BLOCK + tail, "out": out,
                 "hash_ids": list(blocks), "input_types": ["text"], "output_types": ["tool_use"],
                 "stop": "tool_use", "api_time": 0.05, "think_time": round(rng.uniform(*think_s), 3)}
            )  # fmt: skip
            t += 0.1
            if turn == 1 and rng.random() < 0.4:  # two sub-agents, waited for by the next call
                for k in range(2):
                    sub = system + fresh(_blocks(rng.lognormvariate(5.5, 0.4)))
                    sub_requests = []
                    for j in range(2):
                        sub_out = max(8, round(rng.lognormvariate(4.0, 0.4)))
                        sub_requests.append(
                            {"t": round(0.1 * j, 3), "type": "n", "model": "m", "in": len(sub) * BLOCK,
                             "out": sub_out, "hash_ids": list(sub), "input_types": ["text"],
                             "output_types": ["text"], "stop": "end_turn", "api_time": 0.05,
                             "think_time": round(rng.uniform(*think_s), 3)}
                        )  # fmt: skip
                        sub = sub + fresh(_blocks(sub_out + rng.lognormvariate(5.0, 0.5)))
                    requests.append(
                        {"t": round(t, 3), "type": "subagent", "agent_id": f"a{c}-{k}", "subagent_type": "Explore",
                         "duration_ms": 300, "status": "completed", "requests": sub_requests}
                    )  # fmt: skip
            blocks = blocks + fresh(_blocks(out + rng.lognormvariate(5.3, 0.6)))  # output and a tool result
        doc = {"id": f"conv-{c:03d}", "block_size": BLOCK, "hash_id_scope": "global", "requests": requests}
        (folder / f"conv-{c:03d}.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return folder
