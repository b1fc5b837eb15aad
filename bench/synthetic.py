"""Synthetic RequestRecords, for tests and benchmarks of the trace path.

Place in the map (docs/architecture.md): beside the TraceSink; nothing in a real run uses it. Records
are a deterministic function of their index, so a reader can check every row it reads back.
"""

from __future__ import annotations

from swarm.record import RequestIdentity, RequestRecord, Status

_STATUSES = (Status.OK,) * 18 + (Status.HTTP_ERROR, Status.TIMEOUT)


def synthetic_record(i: int, *, run_id: str = "synthetic", chunks: int = 16) -> RequestRecord:
    """Record number ``i``: a plausible streamed request of a 4-level tree-of-thought agent."""
    agent = i // 13
    node = i % 13
    depth = 0 if node == 0 else (1 if node <= 3 else 2)
    status = _STATUSES[i % len(_STATUSES)]
    ok = status is Status.OK
    base = 1_700_000_000_000_000_000 + i * 1_000_000
    ttft = 20_000_000 + (i % 97) * 100_000
    chunk_ns = tuple(ttft + k * 8_000_000 for k in range(chunks)) if ok else ()
    prompt = 1000 + node * 150
    return RequestRecord(
        identity=RequestIdentity(
            run_id=run_id,
            target="emulator-sglang",
            engine="sglang",
            worker=i % 4,
            agent_id=agent,
            profile="coder",
            topology="tree_of_thought",
            session_id=f"s{agent}",
            node=f"n{node}",
            parent_nodes=() if node == 0 else (f"n{(node - 1) // 3}",),
            depth=depth,
            branch=node % 3,
            role="expand" if node % 2 else "evaluate",
            system_prompt_id=agent % 4,
            request_id=f"r{i}",
        ),
        dialect="openai-chat",
        model="m",
        stream=True,
        scheduled_ns=base,
        sent_ns=base + 50_000,
        queue_ns=50_000,
        ttft_ns=ttft if ok else None,
        e2e_ns=(chunk_ns[-1] + 1_000_000) if ok else 5_000_000,
        chunk_ns=chunk_ns,
        # timed by kernel receive stamps, as swarm's own client records a plain-http target;
        # the client read each event 20-80 us after the kernel had it
        clock="kernel" if ok else "user",
        chunk_lag_ns=tuple(20_000 + (i * 7 + k * 13) % 60_000 for k in range(len(chunk_ns))) if ok else (),
        status=status,
        http_status=200 if ok else 500,
        error=None if ok else "HTTP 500: synthetic failure",
        finish_reason="length" if ok else None,
        max_tokens=chunks,
        prompt_tokens=prompt,
        completion_tokens=chunks if ok else None,
        cached_tokens=(prompt - 160) if ok and depth else 0,
        prompt_tokens_est=prompt,
        ideal_cached_tokens_est=prompt - 150 if depth else 0,
        block_hashes=tuple((i * 31 + k) & 0xFFFFFFFFFFFFFFFF for k in range(prompt // 512 + 1)),
    )
