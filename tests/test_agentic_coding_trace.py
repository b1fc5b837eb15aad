"""Agentic-coding traces (callanjfox/agentic-coding-analysis, docs/TRACE_FORMAT.md) in: requests,
tokens and hash ids as the file says; main agent, sub-agent and nested sub-agent joined by their
parents with the recorded think times; bad records named with their line; and a replay on the
emulator whose realised reuse equals the ideal.

Fixture (tests/data/agentic_coding, source in its SOURCE.md), entries in file order:

item  place                      node        depth  parents  gap  offset  line
0     requests[0]                r0          0      ()       0    0       9
1     requests[1]                r1          0      (0,)     2    3       23
-     requests[2]  sub-agent     (t 4, 5.5 s)                             36
2     requests[2].requests[0]    r2.r0       1      (1,)     0    4       49
3     requests[2].requests[1]    r2.r1       1      (2,)     1    5.5     62
-     requests[2].requests[2]  nested sub-agent (t 2, 2 s)                75
4     ...requests[2].requests[0] r2.r2.r0    2      (3,)     0    6       88
5     ...requests[2].requests[1] r2.r2.r1    2      (4,)     1    7.5     101
6     requests[2].requests[3]    r2.r3       1      (3, 5)   3-2  9       116
7     requests[3]                r3          0      (1, 6)   6.5-5.5  10.5  131
8     requests[4]                r4          0      (7,)     2    14.5    144
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from sending import replay_one_at_a_time

from swarm.emulator.http_server import EmulatorThread
from swarm.errors import InputError
from swarm.replay.agentic_coding_trace import import_agentic_coding
from swarm.replay.plan import ReplayItem
from swarm.runtime.replay_source import group_sessions, item_messages

DATA = Path(__file__).parent / "data" / "agentic_coding"
FIXTURE = DATA / "fixture-subagents.json"
NODES = ["r0", "r1", "r2.r0", "r2.r1", "r2.r2.r0", "r2.r2.r1", "r2.r3", "r3", "r4"]


def _requests(records: list[dict]) -> list[dict]:
    """The LLM requests of a trace's list, sub-agents' included, in file order."""
    out: list[dict] = []
    for r in records:
        out.extend(_requests(r["requests"]) if r["type"] == "subagent" else [r])
    return out


def _words(item: ReplayItem) -> list[str]:
    (message,) = item_messages(item)
    return message.content.split()


def test_requests_and_tokens_are_the_files() -> None:
    data = json.loads(FIXTURE.read_text())
    recorded = _requests(data["requests"])
    plan = import_agentic_coding(FIXTURE)
    assert plan.default_mode == "dependent" and plan.source_format == "agentic_coding"
    assert len(plan.items) == len(recorded) == 9
    assert sum(it.prompt_tokens for it in plan.items) == data["totals"]["combined_tokens"]["input"] == 2886
    assert sum(it.max_tokens for it in plan.items) == data["totals"]["combined_tokens"]["output"] == 194
    assert [it.prompt_tokens for it in plan.items] == [r["in"] for r in recorded]
    assert [it.max_tokens for it in plan.items] == [r["out"] for r in recorded]
    assert [list(it.block_ids) for it in plan.items] == [r["hash_ids"] for r in recorded]
    assert {it.block_tokens for it in plan.items} == {data["block_size"]} == {64}
    assert {it.identity.session_id for it in plan.items} == {"fixture-0001"}
    assert len(group_sessions(plan.items)) == 1
    for it in plan.items:  # a prompt has exactly its token count in words
        assert len(_words(it)) == it.prompt_tokens


def test_parents_depth_and_gaps_follow_the_file() -> None:
    items = import_agentic_coding(FIXTURE).items
    assert [it.identity.node for it in items] == NODES
    assert [it.parents for it in items] == [(), (0,), (1,), (2,), (3,), (4,), (3, 5), (1, 6), (7,)]
    assert [it.identity.depth for it in items] == [0, 0, 1, 1, 2, 2, 1, 0, 0]
    assert [it.identity.role for it in items] == ["main"] * 2 + ["subagent"] * 5 + ["main"] * 2
    # think_time, less the sub-agents' runs for the request that waited for them
    assert [it.gap_s for it in items] == pytest.approx([0, 2, 0, 1, 0, 1, 1, 1, 2])
    assert [it.offset_s for it in items] == pytest.approx([0, 3, 4, 5.5, 6, 7.5, 9, 10.5, 14.5])
    assert items[7].identity.parent_nodes == ("r1", "r2.r3")
    assert items[2].identity.parent_nodes == ("r1",)  # the main-agent request that spawned it
    assert items[4].identity.request_id == "fixture-0001:r2.r2.r0"


def test_gaps_without_think_time_come_from_the_recorded_ends(tmp_path: Path) -> None:
    """The fixture's t, api_time and duration_ms agree with its think_time: without think_time
    (nor duration_ms) the gaps are worked out from the ends, and come out the same."""

    def strip(records: list[dict]) -> None:
        for r in records:
            r.pop("think_time", None)
            r.pop("duration_ms", None)
            if r["type"] == "subagent":
                strip(r["requests"])

    data = json.loads(FIXTURE.read_text())
    strip(data["requests"])
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data))
    want = import_agentic_coding(FIXTURE).items
    got = import_agentic_coding(bare).items
    assert [it.gap_s for it in got] == pytest.approx([it.gap_s for it in want])
    assert [it.parents for it in got] == [it.parents for it in want]


def test_a_background_subagent_is_not_waited_for(tmp_path: Path) -> None:
    data = json.loads(FIXTURE.read_text())
    data["requests"][2]["status"] = "async_launched"
    path = tmp_path / "async.json"
    path.write_text(json.dumps(data))
    items = import_agentic_coding(path).items
    assert items[7].parents == (1,) and items[7].gap_s == pytest.approx(6.5)
    assert items[2].parents == (1,)  # still spawned by r1


def test_a_subagent_that_ends_with_a_nested_one_ends_when_that_one_does(tmp_path: Path) -> None:
    data = json.loads(FIXTURE.read_text())
    del data["requests"][2]["requests"][3]  # agent_001 now ends with agent_002
    path = tmp_path / "nested-last.json"
    path.write_text(json.dumps(data))
    items = import_agentic_coding(path).items
    assert [it.identity.node for it in items] == [n for n in NODES if n != "r2.r3"]
    assert items[6].parents == (1, 5) and items[6].gap_s == pytest.approx(1.0)


def test_equal_leading_hash_ids_give_equal_leading_text() -> None:
    items = import_agentic_coding(FIXTURE).items
    by_node = dict(zip(NODES, items, strict=True))
    r0, r1, r3, r4 = (_words(by_node[n]) for n in ("r0", "r1", "r3", "r4"))
    assert r0 == r1[:256] == r3[:256] == r4[:256]  # blocks 1-4: the whole of r0
    assert r1[:320] == r3[:320] and r1[320] != r3[320]  # blocks 1-5, then r1's own tail
    assert r3 == r4[:512]
    sub, nested = _words(by_node["r2.r0"]), _words(by_node["r2.r2.r0"])
    assert sub[:64] == nested[:64] and sub[64] != nested[64]  # block 20 shared, then 21 vs 30
    assert sub[0] != r0[0]  # the sub-agent's prefix is its own


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('"type": "subagent",\n      "agent_id"', '"type": "task",\n      "agent_id"',
         r"line 36, requests\[2\]: type 'task'"),
        ('"in": 330', '"in": -330', r"line 23, requests\[1\]: in -330"),
        ('"in": 256', '"in": 64', r"line 9, requests\[0\]: 4 hash ids but in=64"),
        ('"out": 50,\n', "", r"line 144, requests\[4\]: out is missing"),
        ('"think_time": 3.0', '"think_time": "slow"', r"line 116, requests\[2\]\.requests\[3\]: think_time 'slow'"),
        ('"t": 2.0,', '"t": -2.0,', r"line 75, requests\[2\]\.requests\[2\]: t -2.0"),
        ("[20, 30, 31]", '[20, 30, "b31"]', r"line 101, requests\[2\]\.requests\[2\]\.requests\[1\]: hash_ids"),
        ('"status": "completed",\n          "models"', '"status": 3,\n          "models"',
         r"line 75, requests\[2\]\.requests\[2\]: status 3"),
    ],
)  # fmt: skip
def test_bad_records_are_named_with_their_line(tmp_path: Path, old: str, new: str, message: str) -> None:
    text = FIXTURE.read_text()
    assert text.count(old) == 1
    bad = tmp_path / "bad.json"
    bad.write_text(text.replace(old, new))
    with pytest.raises(InputError, match=message) as err:
        import_agentic_coding(bad)
    assert str(bad) in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"id": "x",\n "requests": [\n {"t": }\n]}', r"line 3: not valid JSON"),
        ('[{"t": 0}]', 'expected an object with a "requests" list'),
        ('{"block_size": 0, "requests": []}', r"block_size 0"),
        ('{"hash_id_scope": "galactic", "requests": []}', r"hash_id_scope 'galactic'"),
        ('{"requests": []}', r"no request: nothing to replay"),
        (
            '{"requests": [{"type": "subagent", "t": 1, "requests": {}}]}',
            r"requests\[0\]: requests: expected a list",
        ),
    ],
)
def test_bad_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        import_agentic_coding(bad)
    assert str(bad) in str(err.value)


def test_a_folder_is_one_session_per_trace_and_bad_files_can_be_skipped(tmp_path: Path) -> None:
    data = json.loads(FIXTURE.read_text())
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(data))
    shared = import_agentic_coding(tmp_path)  # "global" ids: equal ids are equal blocks
    assert len(shared.items) == 18 and len(group_sessions(shared.items)) == 2
    assert shared.items[9].parents == () and shared.items[10].parents == (9,)  # indices run on
    assert shared.items[0].block_ids == shared.items[9].block_ids
    data["hash_id_scope"] = "local"  # per-trace ids: the same numbers are different blocks
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(data))
    apart = import_agentic_coding(tmp_path)
    assert not set(apart.items[0].block_ids) & set(apart.items[9].block_ids)
    assert {it.identity.session_id for it in apart.items} == {"fixture-0001", "fixture-0001@b.json"}
    (tmp_path / "c.json").write_text('{"requests": [{"t": 0, "type": "x"}]}')
    with pytest.raises(InputError, match=r"c\.json: line 1, requests\[0\]: type 'x'"):
        import_agentic_coding(tmp_path)
    plan = import_agentic_coding(tmp_path, skip_bad_lines=True)
    assert len(plan.items) == 18
    assert plan.notes and plan.notes[0].startswith("skipped 1 bad trace file(s); first: ")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"no \.json files"):
        import_agentic_coding(empty)


def test_a_replay_on_the_emulator_reuses_what_the_ideal_says(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    """The fixture against the sglang emulator, one request at a time (waits scaled to 0): every
    request's realised cached tokens equal its ideal, which is the prefix its hash ids share with
    an earlier prompt: the main agent its own growing prefix, the sub-agents theirs (the nested
    one the first block of its parent's)."""
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    plan = import_agentic_coding(FIXTURE)
    table = replay_one_at_a_time(plan, emu.url, str(tmp_path / "runs"))
    assert table.num_rows == 9
    cached = table["cached_tokens"].to_pylist()
    assert cached == table["ideal_cached_tokens_est"].to_pylist()
    by_node = dict(zip(table["node"].to_pylist(), cached, strict=True))
    assert by_node == {
        "r0": 0, "r1": 256, "r2.r0": 0, "r2.r1": 192, "r2.r2.r0": 64, "r2.r2.r1": 128,
        "r2.r3": 256, "r3": 320, "r4": 512,
    }  # fmt: skip
