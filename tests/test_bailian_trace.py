"""Qwen-Bailian usage traces in (issue 17): conversations kept from ``parent_chat_id``, 16-token
blocks as shared prompt text, bad lines named, and a replay whose realised reuse equals the ideal.

The fixture (tests/data/bailian, source in its SOURCE.md) is hand-written from the published
format: six requests, in file order

    index  chat  parent  t (s)   input  output  turn  hash ids (16 tokens each)
    0      7     -1       0.0    100    30      1     1 2 3 4 10 11 12
    1      12    -1       3.0     90    20      1     1 2 3 4 30 31
    2      15    7       12.5    170    25      2     1 2 3 4 10 11 13 14 15 16 17
    3      21    -1      15.0     50    10      1     40 41 42 43
    4      30    12      20.0    148    40      2     1 2 3 4 30 32 .. 36
    5      44    15      40.25   245    60      3     1 2 3 4 10 11 13 .. 16 18 .. 23

so the ideal reuse, one request at a time in this order, is what each shares with an earlier
prompt in whole blocks (a block's first word names it, so a different id differs at once):
0; 64 (the system prompt, blocks 1-4); 96 (blocks 1-4, 10, 11 of chat 7; its last block 12 is
replaced by 13); 0; 80 (blocks 1-4, 30 of chat 12); 160 (blocks 1-4, 10, 11, 13-16 of chat 15).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from swarm.emulator.http_server import EmulatorThread
from swarm.errors import InputError
from swarm.replay.bailian_trace import BLOCK_TOKENS, import_bailian
from swarm.replay.plan import ReplayPlan
from swarm.replay.reading import Filters
from swarm.runtime.replay_source import group_sessions, item_messages

FIXTURE = Path(__file__).parent / "data" / "bailian" / "two-conversations_blksz_16.jsonl"
IDEAL = [0, 64, 96, 0, 80, 160]


def rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


def words(item: Any) -> list[str]:
    (message,) = item_messages(item)
    return str(message.content).split()


def test_every_request_is_one_item_with_the_files_numbers() -> None:
    plan = import_bailian(FIXTURE)
    recorded = rows()
    assert plan.source_format == "bailian" and plan.default_mode == "timed" and plan.notes == []
    assert len(plan.items) == len(recorded) == 6
    assert [it.prompt_tokens for it in plan.items] == [r["input_length"] for r in recorded]
    assert sum(it.prompt_tokens for it in plan.items) == sum(r["input_length"] for r in recorded) == 803
    assert sum(it.max_tokens for it in plan.items) == sum(r["output_length"] for r in recorded) == 185
    assert [it.block_ids for it in plan.items] == [tuple(r["hash_ids"]) for r in recorded]
    assert {it.block_tokens for it in plan.items} == {BLOCK_TOKENS} == {16}
    assert [it.offset_s for it in plan.items] == pytest.approx([0.0, 3.0, 12.5, 15.0, 20.0, 40.25])
    assert [it.identity.request_id for it in plan.items] == ["7", "12", "15", "21", "30", "44"]
    assert [it.identity.role for it in plan.items] == ["text", "search", "text", "text", "search", "text"]
    for it in plan.items:  # the synthesised prompt has exactly the recorded length in words
        assert len(words(it)) == it.prompt_tokens


def test_conversations_follow_parent_chat_id() -> None:
    """Sessions are the chains 7 -> 15 -> 44 and 12 -> 30, and 21 alone; each turn waits for its
    parent, the gap being the time between the two arrivals."""
    items = import_bailian(FIXTURE).items
    assert [it.identity.session_id for it in items] == ["7", "12", "7", "21", "12", "7"]
    assert [it.parents for it in items] == [(), (), (0,), (), (1,), (2,)]
    assert [it.gap_s for it in items] == pytest.approx([0.0, 0.0, 12.5, 0.0, 17.0, 27.75])
    assert [it.identity.node for it in items] == ["turn1", "turn1", "turn2", "turn1", "turn2", "turn3"]
    assert [it.identity.depth for it in items] == [0, 0, 1, 0, 1, 2]
    assert [it.identity.parent_nodes for it in items] == [(), (), ("turn1",), (), ("turn1",), ("turn2",)]
    sessions = group_sessions(items)
    assert [(s.key, [it.index for it in s.items]) for s in sessions] == [
        ("7", [0, 2, 5]),
        ("12", [1, 4]),
        ("21", [3]),
    ]


def test_equal_leading_hash_ids_give_equal_leading_text() -> None:
    items = import_bailian(FIXTURE).items
    text = [words(it) for it in items]
    system = text[0][:64]
    for i in (1, 2, 4, 5):  # the two conversations share the 4-block system prompt
        assert text[i][:64] == system
    assert text[1][64] != text[0][64] and text[3][0] != text[0][0]
    assert text[2][:96] == text[0][:96] and text[2][96] != text[0][96]  # block 12 became 13
    assert text[5][:160] == text[2][:160] and text[5][160] != text[2][160]
    assert text[4][:80] == text[1][:80] and text[4][80] != text[1][80]


def plan_of(tmp_path: Path, records: list[dict[str, Any]], **kwargs: Any) -> ReplayPlan:
    """A plan of ``records`` written as JSON lines."""
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return import_bailian(path, **kwargs)


def test_a_line_without_turn_or_type_counts_its_chain(tmp_path: Path) -> None:
    bare = [{k: v for k, v in r.items() if k not in ("turn", "type")} for r in rows()]
    items = plan_of(tmp_path, bare).items
    assert [it.identity.depth for it in items] == [0, 0, 1, 0, 1, 2]
    assert [it.identity.node for it in items] == ["turn1", "turn1", "turn2", "turn1", "turn2", "turn3"]
    assert {it.identity.role for it in items} == {""}


def write_with(tmp_path: Path, line: str, at: int) -> Path:
    """The fixture with ``line`` put in as line ``at`` (1-based)."""
    lines = FIXTURE.read_text().splitlines()
    lines.insert(at - 1, line)
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def row(**changes: Any) -> str:
    """A good line (chat 99, turn 1, at 40.25 s: in order anywhere at the end) with ``changes``."""
    base: dict[str, Any] = {
        "chat_id": 99, "parent_chat_id": -1, "timestamp": 40.25, "input_length": 100,
        "output_length": 30, "type": "text", "turn": 1, "hash_ids": [1, 2, 3, 4, 90, 91, 92],
    }  # fmt: skip
    base.update(changes)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


BAD_LINES = {
    "negative input": (
        row(input_length=-3),
        "line 7: input_length -3: expected a whole number, not negative",
    ),
    "fractional output": (row(output_length=2.5), "line 7: output_length 2.5: expected a whole number"),
    "missing chat id": (row(chat_id=...), "line 7: chat_id is missing"),
    "infinite input": (row(input_length=1e999), "line 7: input_length inf: expected a whole number"),
    "string timestamp": (row(timestamp="1.0"), "line 7: timestamp '1.0': expected seconds"),
    "too many hash ids": (
        row(hash_ids=list(range(8))),
        "line 7: hash_ids: 8 ids but input_length 100 allows at most 7 blocks of 16",
    ),
    "hash ids not integers": (row(hash_ids=["a"]), "line 7: hash_ids ['a']: expected a list of integers"),
    "missing hash ids": (row(hash_ids=...), "line 7: hash_ids is missing"),
    "turn zero": (row(turn=0), "line 7: turn 0: expected a whole number, at least 1"),
    "parent below -1": (
        row(parent_chat_id=-2),
        "line 7: parent_chat_id -2: expected a whole number, at least -1",
    ),
    "its own parent": (row(parent_chat_id=99), "line 7: parent_chat_id 99: a request cannot continue itself"),
    "type not a string": (row(type=3), "line 7: type 3: expected a string"),
    "duplicate chat id": (row(chat_id=15), "line 7: chat_id 15: already used on line 3"),
    "out of order": (row(timestamp=1.0), "line 7: timestamp 1 s is earlier than the line before (40.25 s)"),
    "not JSON": ('{"chat_id": 99, "timestamp": 4', "line 7: not valid JSON"),
    "not an object": ("[1, 2]", "line 7: expected a JSON object, got list"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_bad_line_is_named_with_file_line_and_field(case: str, tmp_path: Path) -> None:
    line, message = BAD_LINES[case]
    path = write_with(tmp_path, line, 7)
    with pytest.raises(InputError) as err:
        import_bailian(path)
    assert str(err.value).startswith(f"{path}: {message}"), str(err.value)
    assert "--skip-bad-lines" in str(err.value)


def test_a_line_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(FIXTURE.read_bytes()[:200].rsplit(b"\n", 1)[0] + b"\n\xff\xfe\n")
    with pytest.raises(InputError, match=r"line 2: not UTF-8 text"):
        import_bailian(path)


def test_skip_bad_lines_counts_them_and_keeps_the_rest(tmp_path: Path) -> None:
    path = write_with(tmp_path, row(input_length=-3), 4)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:1], "not json", *lines[1:]]) + "\n")  # now lines 2 and 5
    plan = import_bailian(path, skip_bad_lines=True)
    assert [it.identity.request_id for it in plan.items] == ["7", "12", "15", "21", "30", "44"]
    assert [it.parents for it in plan.items] == [(), (), (0,), (), (1,), (2,)]
    assert plan.notes == [
        f"skipped 2 bad line(s); first: {path}: line 2: not valid JSON (Expecting value); truncated line?"
    ]


def test_a_parent_not_in_the_file_makes_a_root_with_a_note(tmp_path: Path) -> None:
    records = rows()
    del records[0]  # chat 7: chat 15 continues a request the file does not hold
    plan = plan_of(tmp_path, records)
    assert [it.identity.request_id for it in plan.items] == ["12", "15", "21", "30", "44"]
    assert [it.parents for it in plan.items] == [(), (), (), (0,), (1,)]
    assert [it.identity.session_id for it in plan.items] == ["12", "15", "21", "12", "15"]
    assert [it.identity.depth for it in plan.items] == [0, 1, 0, 1, 2]  # the recorded turn stays
    assert len(plan.notes) == 1 and plan.notes[0].startswith("1 request(s) continue a parent_chat_id")


def test_filters_window_limit_and_sample() -> None:
    """``window`` 10:30 keeps chats 15, 21, 30 (offsets from the first kept), cutting both
    parents: two roots and a note; ``limit`` keeps the first N; ``sample`` is seeded and draws
    whole conversations."""
    plan = import_bailian(FIXTURE, Filters(window=(10.0, 30.0)))
    assert [it.identity.request_id for it in plan.items] == ["15", "21", "30"]
    assert [it.offset_s for it in plan.items] == pytest.approx([0.0, 2.5, 7.5])
    assert all(it.parents == () for it in plan.items)
    assert plan.notes[0].startswith("2 request(s) continue a parent_chat_id")
    limited = import_bailian(FIXTURE, Filters(limit=3))
    assert [it.identity.request_id for it in limited.items] == ["7", "12", "15"]
    assert limited.items[2].parents == (0,) and limited.notes == []
    assert import_bailian(FIXTURE, Filters(sample=1.0)).items == import_bailian(FIXTURE).items
    # sample draws whole conversations (7-15-44, 12-30, 21), seeded
    conversations = [{"7", "15", "44"}, {"12", "30"}, {"21"}]
    kept_sets = []
    for seed in range(12):
        try:
            half = import_bailian(FIXTURE, Filters(sample=0.5, seed=seed))
        except InputError:
            continue  # this seed kept no conversation
        assert half.items == import_bailian(FIXTURE, Filters(sample=0.5, seed=seed)).items
        kept = {it.identity.request_id for it in half.items}
        assert all(c <= kept or not (c & kept) for c in conversations), kept
        assert all(it.parents or it.identity.node == "turn1" for it in half.items)
        kept_sets.append(kept)
    assert any(k < {"7", "12", "15", "21", "30", "44"} for k in kept_sets)
    with pytest.raises(InputError, match="no requests left"):
        import_bailian(FIXTURE, Filters(window=(100.0, 200.0)))


def test_an_empty_or_missing_file_is_an_input_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match="no requests left"):
        import_bailian(empty)
    with pytest.raises(InputError, match="no such file"):
        import_bailian(tmp_path / "absent.jsonl")


@pytest.mark.parametrize("mode", ["timed", "dependent"])
def test_a_replay_reuses_what_the_ideal_says(
    mode: str, emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    """The fixture against the sglang emulator (a token-level cache), one request at a time and
    100 times faster: every request's realised cached tokens equal its ideal; timed, the ideal is
    the table in the module docstring. Dependent, each later turn went out after its parent ended."""
    from sending import replay_run

    from swarm.runtime.specs import TargetSpec
    from swarm.trace.reader import read_requests

    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    plan = import_bailian(FIXTURE)
    result = replay_run(
        plan, [TargetSpec(name="emu", url=emu.url, engine="sglang")], mode=mode, speed=100.0,
        max_in_flight=1, output_dir=str(tmp_path / "runs"),
    )  # fmt: skip
    assert result.manifest.status.value == "complete"
    table = read_requests(result.run_dir)
    assert table.num_rows == 6
    assert pc.all(pc.equal(table["status"], "ok")).as_py()
    by_id = {r["request_id"]: r for r in table.to_pylist()}
    assert [by_id[i]["cached_tokens"] for i in by_id] == [by_id[i]["ideal_cached_tokens_est"] for i in by_id]
    assert [by_id[i]["prompt_tokens_est"] for i in ("7", "12", "15", "21", "30", "44")] == [
        100, 90, 170, 50, 148, 245,
    ]  # fmt: skip
    if mode == "timed":
        ideal = [by_id[i]["ideal_cached_tokens_est"] for i in ("7", "12", "15", "21", "30", "44")]
        assert ideal == IDEAL
        return
    for child, parent in (("15", "7"), ("44", "15"), ("30", "12")):
        assert by_id[child]["sent_ns"] >= by_id[parent]["sent_ns"] + by_id[parent]["e2e_ns"]
        assert by_id[child]["parent_nodes"] == [by_id[parent]["node"]]
