"""Qwen-Bailian usage traces (Alibaba Cloud Model Studio, "Bailian") as ReplayPlans, conversations kept.

Place in the map (docs/architecture.md, "Replay"): a format module (``FORMAT`` at its end), beside
the flat formats (``timed``; ``Filters`` and bad lines are ``reading``'s) and ``trtllm_trace``. The format is
the one published with the USENIX ATC'25 paper "KVCache Cache in the Wild" (repository
alibaba-edu/qwen-bailian-usagetraces-anon, ``README.md``, "Data Specification of the Traces";
files ``qwen_traceA_blksz_16.jsonl``, ``qwen_traceB_blksz_16.jsonl`` and later
``qwen_coder_blksz_16.jsonl``, ``qwen_thinking_blksz_16.jsonl``; Apache-2.0). JSON lines, one
request each:

- ``chat_id``: the request's id (an integer, unique in the file);
- ``parent_chat_id``: the earlier request of the same conversation this one continues, ``-1``
  for the first (absent or null are read as ``-1`` too);
- ``timestamp``: arrival in **seconds** from the start of the trace file (a float; 0 at the
  trace's start);
- ``input_length``, ``output_length``: prompt and output tokens;
- ``type``: the kind of request (``text``, ``search``, ``image``, ``file``; newer files
  ``thinking`` and others); optional, kept as the request's ``role``;
- ``turn``: the conversation turn, 1 for the first; optional (then the chain depth + 1);
- ``hash_ids``: the prompt's **16-token** blocks, each salted-SipHashed and remapped to an
  integer: equal leading ids are a shared prefix. At most ``ceil(input_length / 16)`` ids.

A request's ``input_length`` and ``hash_ids`` cover the whole prompt it was sent with, history
included (the repository's ``docs/qa-context-growth-pattern.md``: a turn's input repeats the
previous turn's input and output, less the thinking markers; the last, padded block of a
prompt may hash differently in the next turn). So each request is one ReplayItem whose prompt
is synthesised from its block ids (``blocktext``: one fixed text per id), ``prompt_tokens`` =
``input_length`` and ``max_tokens`` = ``output_length`` (at least 1 each).

Conversations: the requests linked by ``parent_chat_id`` are one session (``session_id`` = the
first request's ``chat_id``); a request's ``parents`` is its parent's item and its ``gap_s`` the
time between the two arrivals (the trace records arrivals only, so this gap includes the
parent's own service time: a dependent replay, which waits for the parent to end and then the
gap, spaces turns at least as far as recorded). ``node`` is ``turn<k>``, ``depth`` ``k - 1``,
``request_id`` the ``chat_id``. The default mode is ``timed`` (the offsets are real arrivals);
``dependent`` works too. A parent that is not among the requests read before (cut by a filter,
a skipped line, or the recording's edge) is not an error: the request starts a conversation of
its own, and the plan's notes count such requests.

Bad input (not JSON, a missing or mistyped field, a negative length, more hash ids than the
input allows, a ``chat_id`` used twice, timestamps out of order) is an ``InputError`` naming the
file, the line and the field, or with ``skip_bad_lines`` a skipped line counted in the notes.
Filters as for flat traces: ``window`` (seconds from the trace start), ``sample`` (a seeded
fraction of conversations: a first turn is drawn, the later turns follow it), ``limit``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarm.errors import InputError
from swarm.record import RequestIdentity
from swarm.replay.format import Peek, ReadOptions, TraceFormat
from swarm.replay.plan import ReplayItem, ReplayPlan
from swarm.replay.reading import BadLines, Filters, in_window, parsed_lines

BLOCK_TOKENS = 16
ROOT_PARENT = -1


@dataclass(frozen=True)
class _Request:
    chat_id: int
    parent: int  # ROOT_PARENT for the first of a conversation
    t_s: float
    input_length: int
    output_length: int
    kind: str
    turn: int | None
    hash_ids: tuple[int, ...]


def _whole(obj: dict[str, Any], name: str, *, required: bool = True, low: int = 0) -> int | None:
    """The whole number in ``obj[name]`` (at least ``low``); None when absent and not required."""
    value = obj.get(name)
    if value is None:
        if required:
            raise ValueError(f"{name} is missing")
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value != int(value)
        or value < low
    ):
        want = "not negative" if low == 0 else f"at least {low}"
        raise ValueError(f"{name} {value!r}: expected a whole number, {want}")
    return int(value)


def _request(text: str) -> _Request:
    """One line as a request; ValueError saying which field is wrong, json errors as raised."""
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    chat_id = _whole(obj, "chat_id")
    parent = _whole(obj, "parent_chat_id", required=False, low=ROOT_PARENT)
    t = obj.get("timestamp")
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
        raise ValueError(f"timestamp {t!r}: expected seconds from the trace start, not negative")
    n_in = _whole(obj, "input_length")
    n_out = _whole(obj, "output_length")
    turn = _whole(obj, "turn", required=False, low=1)
    kind = obj.get("type") or ""
    if not isinstance(kind, str):
        raise ValueError(f"type {kind!r}: expected a string (text, search, image, file)")
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError(
            f"hash_ids {ids!r}: expected a list of integers" if ids is not None else "hash_ids is missing"
        )
    assert chat_id is not None and n_in is not None and n_out is not None
    allowed = -(-n_in // BLOCK_TOKENS)
    if len(ids) > allowed:
        raise ValueError(
            f"hash_ids: {len(ids)} ids but input_length {n_in} allows at most {allowed} blocks of {BLOCK_TOKENS}"
        )
    if parent == chat_id:
        raise ValueError(f"parent_chat_id {parent}: a request cannot continue itself")
    return _Request(
        chat_id, ROOT_PARENT if parent is None else parent, float(t), n_in, n_out, kind, turn, tuple(ids)
    )


def _requests(path: Path, bad: BadLines) -> Iterator[_Request]:
    """The file's requests in order; bad lines reported to ``bad`` (which raises unless skipping)."""
    first_line: dict[int, int] = {}  # chat_id -> the line that used it
    last_t = -math.inf
    for line_no, req in parsed_lines(path, bad, lambda text, _: _request(text)):
        if req.chat_id in first_line:
            bad.bad(line_no, f"chat_id {req.chat_id}: already used on line {first_line[req.chat_id]}")
            continue
        if req.t_s < last_t:
            bad.bad(
                line_no,
                f"timestamp {req.t_s:g} s is earlier than the line before ({last_t:g} s): out of order",
            )
            continue
        first_line[req.chat_id] = line_no
        last_t = req.t_s
        yield req


def import_bailian(
    path: str | Path, filters: Filters | None = None, *, skip_bad_lines: bool = False
) -> ReplayPlan:
    """Read a Qwen-Bailian trace (JSON lines) into a timed plan whose conversations are sessions."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    filters = filters or Filters()
    bad = BadLines(p, skip_bad_lines)
    rng = random.Random(f"sample:{filters.seed}")
    items: list[ReplayItem] = []
    kept: dict[int, tuple[int, float, int]] = {}  # chat_id -> (item index, arrival s, turn)
    orphans = 0
    dropped: set[int] = set()  # chat ids of conversations --sample left out
    for req, rel in in_window(_requests(p, bad), filters.window):
        # --sample draws whole conversations: a first turn is drawn, a later turn follows it
        if filters.sample is not None and (
            req.parent in dropped or (req.parent == ROOT_PARENT and rng.random() >= filters.sample)
        ):
            dropped.add(req.chat_id)
            continue
        parent = kept.get(req.parent) if req.parent != ROOT_PARENT else None
        if req.parent != ROOT_PARENT and parent is None:
            orphans += 1
        parents: tuple[int, ...] = ()
        if parent is None:
            session, gap, chain_turn = str(req.chat_id), 0.0, 1
        else:
            at, parent_t, parent_turn = parent
            session = items[at].identity.session_id
            parents, gap, chain_turn = (at,), max(req.t_s - parent_t, 0.0), parent_turn + 1
        turn = req.turn if req.turn is not None else chain_turn
        index = len(items)
        kept[req.chat_id] = (index, req.t_s, turn)
        items.append(
            ReplayItem(
                index=index,
                offset_s=rel,
                prompt_tokens=max(req.input_length, 1),
                max_tokens=max(req.output_length, 1),
                block_ids=req.hash_ids,
                block_tokens=BLOCK_TOKENS,
                parents=parents,
                gap_s=gap,
                identity=RequestIdentity(
                    session_id=session,
                    node=f"turn{turn}",
                    parent_nodes=tuple(items[i].identity.node for i in parents),
                    depth=turn - 1,
                    role=req.kind,
                    request_id=str(req.chat_id),
                ),
            )
        )
        if filters.limit is not None and len(items) >= filters.limit:
            break
    if items and filters.window is not None:
        base = items[0].offset_s
        items = [dataclasses.replace(it, offset_s=it.offset_s - base) for it in items]
    if not items:
        raise InputError(f"{p}: no requests left to replay (after filters)")
    plan = ReplayPlan(items=items, source=str(p), source_format=FORMAT.name, default_mode=FORMAT.default_mode)
    if bad.count:
        plan.notes.append(f"skipped {bad.count} bad line(s); first: {bad.first}")
    if orphans:
        plan.notes.append(
            f"{orphans} request(s) continue a parent_chat_id not among the requests read (cut by a "
            "filter, a skipped line or the recording's edge): each starts a conversation of its own"
        )
    return plan


def read_bailian(source: str, options: ReadOptions) -> ReplayPlan:
    return import_bailian(source, options.filters, skip_bad_lines=options.skip_bad_lines)


def detect(peek: Peek) -> bool:
    return peek.file_with(".jsonl") and '"chat_id"' in peek.first_line


FORMAT = TraceFormat(
    name="bailian",
    title="Qwen-Bailian JSON lines (.jsonl with chat_id)",
    detect=detect,
    read=read_bailian,
    filters=True,
    default_mode="timed",
)
