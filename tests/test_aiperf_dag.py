"""AIPerf DAG JSONL files (ai-dynamo/aiperf, docs/benchmark-modes/dag.md) in: every turn of every
forked or spawned run one request, with the file's text and max_tokens; forks continuing their
parent's conversation (a shared prefix), spawns starting fresh and joined where the file says;
bad lines named with their place; and a replay on the emulator whose realised reuse is the ideal.

Fixture (tests/data/aiperf_dag, source in its SOURCE.md): three roots, ``plan`` (line 1),
``sweep`` (an orchestrator, line 7) and ``solo`` (line 8). Items in plan order:

item  node                             parents  gap s  offset s  words  max  role
0     plan.t0                          ()       0      0         20     40   root (spawns scout, joined at t2)
1     plan.t0/scout.t0                 (0,)     0      0         16     16   spawn
2     plan.t0/scout.t1                 (1,)     0.5    0.5       40     12   spawn
3     plan.t1                          (0,)     0.25   0.25      70     24   root (forks audit, background)
4     plan.t1>audit.t0                 (3,)     0      0.25      100    20   fork (an image part dropped)
5     plan.t2                          (3, 2)   0.1    0.6       104    32   root (joins scout; forks both reviews)
6     plan.t2>review-a.t0              (5,)     0      0.6       141    24   fork
7     plan.t2>review-a.t1              (6,)     0.05   0.65      171    16   fork
8     plan.t2>review-b.t0              (5,)     0      0.6       142    24   fork (spawns checker, joined at t1)
9     plan.t2>review-b.t0/checker.t0   (8,)     0      0.6       11     10   spawn
10    plan.t2>review-b.t1              (8, 9)   0      0.6       178    8    fork
11    sweep.t0/checker.t0              ()       0      0         11     10   spawn (round 0)
12    sweep.t1/checker.t0              (11,)    1.5    1.5       11     10   spawn (round 1, after 1.5 s think)
13    sweep.t1/scout.t0                (11,)    1.5    1.5       16     16   spawn
14    sweep.t1/scout.t1                (13,)    0.5    2.0       40     12   spawn
15    solo.pre/checker.t0              ()       0      0         11     10   spawn (pre-session)
16    solo.t0                          ()       0.02   0.02      5      30   root

A prompt's words: its messages' words, each earlier reply a stand-in of its max_tokens words
(plan.t1 = 20 + 40 + 10). Totals: 1,087 prompt words, 314 output tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sending import replay_one_at_a_time

from swarm.emulator.http_server import EmulatorThread
from swarm.errors import InputError
from swarm.replay.aiperf_dag import DEFAULT_MAX_TOKENS, import_aiperf_dag
from swarm.replay.formats import import_trace
from swarm.replay.plan import ReplayItem
from swarm.replay.reading import Filters
from swarm.runtime.replay_source import group_sessions, item_messages

FIXTURE = Path(__file__).parent / "data" / "aiperf_dag" / "agent-tree.dag.jsonl"
NODES = [
    "plan.t0", "plan.t0/scout.t0", "plan.t0/scout.t1", "plan.t1", "plan.t1>audit.t0", "plan.t2",
    "plan.t2>review-a.t0", "plan.t2>review-a.t1", "plan.t2>review-b.t0", "plan.t2>review-b.t0/checker.t0",
    "plan.t2>review-b.t1", "sweep.t0/checker.t0", "sweep.t1/checker.t0", "sweep.t1/scout.t0",
    "sweep.t1/scout.t1", "solo.pre/checker.t0", "solo.t0",
]  # fmt: skip


def lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


def words(item: ReplayItem) -> list[str]:
    return [w for m in item_messages(item) for w in m.content.split()]


def test_every_turn_of_every_run_is_one_request_with_the_files_numbers() -> None:
    plan = import_aiperf_dag(FIXTURE)
    assert plan.source_format == "aiperf_dag" and plan.default_mode == "dependent"
    assert [it.identity.node for it in plan.items] == NODES
    by_session = {c["session_id"]: c for c in lines()}
    turn_max = {sid: [t["max_tokens"] for t in c.get("turns", [])] for sid, c in by_session.items()}
    for it in plan.items:  # max_tokens is the turn's own, whichever run it belongs to
        sid, turn = it.identity.node.rsplit("/", 1)[-1].rsplit(">", 1)[-1].split(".t")
        assert it.max_tokens == turn_max[sid.removesuffix(".pre")][int(turn)]
    assert sum(it.max_tokens for it in plan.items) == 314
    assert [it.prompt_tokens for it in plan.items] == [
        20, 16, 40, 70, 100, 104, 141, 171, 142, 11, 178, 11, 11, 16, 40, 11, 5,
    ]  # fmt: skip
    assert sum(it.prompt_tokens for it in plan.items) == 1087
    for it in plan.items:
        assert len(words(it)) == it.prompt_tokens
    assert [s.key for s in group_sessions(plan.items)] == ["plan", "sweep", "solo"]
    assert plan.notes == ["1 content part(s) that are not text (images, audio) left out of the prompts"]


def test_parents_gaps_and_offsets_follow_forks_spawns_joins_and_delays() -> None:
    items = import_aiperf_dag(FIXTURE).items
    assert [it.parents for it in items] == [
        (), (0,), (1,), (0,), (3,), (3, 2), (5,), (6,), (5,), (8,), (8, 9), (), (11,), (11,), (13,), (), (),
    ]  # fmt: skip
    assert [it.gap_s for it in items] == pytest.approx(
        [0, 0, 0.5, 0.25, 0, 0.1, 0, 0.05, 0, 0, 0, 0, 1.5, 1.5, 0.5, 0, 0.02]
    )
    assert [it.offset_s for it in items] == pytest.approx(
        [0, 0, 0.5, 0.25, 0.25, 0.6, 0.6, 0.65, 0.6, 0.6, 0.6, 0, 1.5, 1.5, 2.0, 0, 0.02]
    )
    assert [it.identity.role for it in items] == [
        "root", "spawn", "spawn", "root", "fork", "root", "fork", "fork", "fork", "spawn", "fork",
        "spawn", "spawn", "spawn", "spawn", "spawn", "root",
    ]  # fmt: skip
    assert [it.identity.depth for it in items] == [0, 1, 1, 0, 1, 0, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 0]
    assert [it.identity.branch for it in items][6:9] == [0, 0, 1]  # review-a, its turn 1, review-b
    assert items[13].identity.branch == 1  # scout, second of its round
    assert items[5].identity.parent_nodes == ("plan.t1", "plan.t0/scout.t1")
    assert {it.identity.session_id for it in items[:11]} == {"plan"}
    assert items[12].identity.request_id == "sweep:sweep.t1/checker.t0"


def test_a_fork_continues_its_parents_conversation_and_a_spawn_starts_fresh() -> None:
    items = import_aiperf_dag(FIXTURE).items
    plan_t2, review_a, review_b = (words(items[i]) for i in (5, 6, 8))
    shared = len(plan_t2) + 32  # plan.t2's prompt, then a stand-in of its 32-token reply
    assert review_a[: len(plan_t2)] == plan_t2 and review_a[:shared] == review_b[:shared]
    assert review_a[shared:] == "Review the plan for downtime.".split()
    assert words(items[7])[: len(review_a)] == review_a  # a fork's later turn grows its own prompt
    audit = item_messages(items[4])
    assert audit[-1].content == "Audit the rollback steps for gaps." and audit[-1].role == "user"
    assert [m.role for m in item_messages(items[10])][-2:] == ["user", "user"]  # the tool result, as user
    scout = item_messages(items[1])
    assert [m.role for m in scout] == ["system", "user"] and scout[0].content.startswith("You are a scout")
    # a spawn template played twice sends the same text; its replies' stand-ins are its own
    assert words(items[1]) == words(items[13]) and words(items[2]) != words(items[14])
    assert words(items[2])[:16] == words(items[14])[:16]


def write(tmp_path: Path, rows: list[dict[str, Any]] | list[str]) -> Path:
    path = tmp_path / "dag.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_context_modes_decide_what_a_turn_carries(tmp_path: Path) -> None:
    turns = [
        {"messages": user("one two"), "max_tokens": 3},
        {"messages": [{"role": "assistant", "content": "recorded reply"}, *user("three")], "max_tokens": 2},
    ]
    rows = [{"session_id": m, "context_mode": m, "turns": turns} for m in
            ("deltas_without_responses", "deltas_with_responses", "message_array_with_responses")]  # fmt: skip
    items = import_aiperf_dag(write(tmp_path, rows)).items
    assert [it.prompt_tokens for it in items] == [2, 2 + 3 + 3, 2, 2 + 3, 2, 3]
    assert [m.role for m in item_messages(items[1])] == ["user", "assistant", "assistant", "user"]
    assert [m.content for m in item_messages(items[3])] == ["one two", "recorded reply", "three"]
    assert [m.content for m in item_messages(items[5])] == ["recorded reply", "three"]


def test_defaults_and_what_the_notes_say(tmp_path: Path) -> None:
    rows = [
        {"session_id": "a", "turns": [{"messages": user("hi")}, {"messages": user("more"), "extra": {"max_completion_tokens": 7}}]},
        {"session_id": "o", "orchestrator": True, "rounds": 2, "spawns": ["b"], "think_time_ms": 400, "think_time_sigma": 0.5},
        {"session_id": "b", "turns": [{"messages": [{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "ls"}}]}], "max_tokens": 1}]},
    ]  # fmt: skip
    plan = import_aiperf_dag(write(tmp_path, rows))
    assert [it.max_tokens for it in plan.items] == [DEFAULT_MAX_TOKENS, 7, 1, 1]
    assert plan.items[1].prompt_tokens == 1 + DEFAULT_MAX_TOKENS + 1
    assert [it.gap_s for it in plan.items[2:]] == pytest.approx([0.4, 0.4])  # each round after its think time
    assert plan.items[3].parents == (2,)
    assert '"name":"ls"' in item_messages(plan.items[2])[0].content
    assert plan.notes == [
        f"1 turn(s) without max_tokens: sent with max_tokens={DEFAULT_MAX_TOKENS}",
        "1 orchestrator(s) draw their think time at random (think_time_sigma): replayed with the median think_time_ms",
    ]


GOOD = {"session_id": "z", "turns": [{"messages": user("hello"), "max_tokens": 4}]}


def turn(**changes: Any) -> dict[str, Any]:
    return {"session_id": "z", "turns": [{"messages": user("hello"), "max_tokens": 4, **changes}]}


BAD_LINES = {
    "not JSON": ('{"session_id": "z", "turns": [', "not valid JSON"),
    "not an object": ("[1, 2]", "expected a JSON object (a conversation), got list"),
    "unknown key": ({**GOOD, "turnz": []}, "unknown key(s) ['turnz']"),
    "unknown turn key": (turn(max_token=3), "turns[0]: unknown key(s) ['max_token']"),
    "no session id": ({"turns": GOOD["turns"]}, "session_id: expected a non-empty string"),
    "no turns": ({"session_id": "z", "turns": []}, "turns: expected a non-empty list of turns"),
    "no messages": (turn(messages=[]), "turns[0].messages: expected a non-empty list"),
    "message without role": (turn(messages=[{"content": "x"}]), "turns[0].messages[0]: expected a message object"),
    "bad content": (turn(messages=[{"role": "user", "content": 3}]), "turns[0].messages[0].content: expected a string"),
    "max_tokens zero": (turn(max_tokens=0), "turns[0]: max_tokens 0: expected a whole number, at least 1"),
    "max_tokens true": (turn(max_tokens=True), "turns[0]: max_tokens True"),
    "negative delay": (turn(delay=-5), "turns[0]: delay -5: expected milliseconds, not negative"),
    "bad context mode": ({**GOOD, "context_mode": "message_array_without_responses"}, "context_mode: 'message_array_without_responses'"),
    "join before": (turn(spawns=[{"children": ["plan"], "join_at": 0}]), "turns[0].spawns[0]: join_at 0: expected a later turn"),
    "join after the end": (turn(spawns=[{"children": ["plan"], "join_at": 1}]), "turns[0].spawns: join_at 1: the conversation has 1 turns"),
    "spawned twice": (turn(spawns=["plan", {"children": ["plan"]}]), "turns[0].spawns: a session spawned twice"),
    "fork not last": ({"session_id": "z", "turns": [{"messages": user("a"), "forks": ["plan"]}, {"messages": user("b")}]},
                      "turns[0].forks[0]: a fork ends its parent"),
    "unknown target": (turn(spawns=["nobody"]), "turns[0].spawns[0]: 'nobody' is not a session_id of this file"),
    "forked twice": (turn(forks=["review-a"]), "turns[0].forks[0]: 'review-a' is forked by 'plan' too"),
    "duplicate id": ({**GOOD, "session_id": "audit"}, "session_id 'audit': already used on line 3"),
    "orchestrator with turns": ({**GOOD, "orchestrator": True}, "turns: an orchestrator has no turns of its own"),
    "rounds on a plain one": ({**GOOD, "rounds": 2}, "rounds: only an orchestrator has it"),
    "pre-session fork target": ({**GOOD, "pre_session_spawns": ["review-a"]}, "pre_session_spawns: 'review-a' is also forked"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_bad_line_is_named_with_file_line_and_place(case: str, tmp_path: Path) -> None:
    line, message = BAD_LINES[case]
    rows = [*FIXTURE.read_text().splitlines(), line if isinstance(line, str) else json.dumps(line)]
    path = write(tmp_path, rows)
    with pytest.raises(InputError) as err:
        import_aiperf_dag(path)
    assert str(err.value).startswith(f"{path}: line 9: {message}"), str(err.value)
    assert "--skip-bad-lines" in str(err.value)


def test_a_cycle_is_named(tmp_path: Path) -> None:
    rows = [
        {"session_id": "a", "turns": [{"messages": user("x"), "spawns": ["b"]}]},
        {"session_id": "b", "turns": [{"messages": user("y"), "spawns": ["a"]}]},
    ]
    with pytest.raises(InputError, match=r"line 2: a cycle: a -> b -> a"):
        import_aiperf_dag(write(tmp_path, rows))


def test_skip_bad_lines_skips_a_bad_line_and_every_line_that_needs_it(tmp_path: Path) -> None:
    rows = FIXTURE.read_text().splitlines()
    rows[5] = rows[5].replace('"max_tokens": 10', '"max_tokens": -1')  # checker, which three others name
    path = write(tmp_path, rows)
    with pytest.raises(InputError, match=r"line 6: turns\[0\]: max_tokens -1"):
        import_aiperf_dag(path)
    plan = import_aiperf_dag(path, skip_bad_lines=True)
    # review-b (spawns checker), sweep and solo (and review-b's parent plan, which forks it) go
    assert plan.notes[0].startswith(f"skipped 5 bad line(s); first: {path}: line 6: turns[0]: max_tokens -1")
    assert {it.identity.session_id for it in plan.items} == {"scout", "audit", "review-a"}
    with pytest.raises(InputError, match=r"line 6: .*\(use --skip-bad-lines"):
        import_trace(path, "aiperf_dag")


def test_files_that_hold_nothing_to_send_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        import_aiperf_dag(tmp_path / "absent.jsonl")
    with pytest.raises(InputError, match="no conversation turn to replay"):
        import_aiperf_dag(write(tmp_path, ["", "  "]))
    with pytest.raises(InputError, match="line 1: not UTF-8 text"):
        (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe{}\n")
        import_aiperf_dag(tmp_path / "bin.jsonl")


def test_one_entry_point_detection_and_no_flat_filters(tmp_path: Path) -> None:
    from swarm.replay.formats import detect_format

    assert detect_format(str(FIXTURE)) == "aiperf_dag"
    assert import_trace(FIXTURE, "aiperf_dag").items == import_aiperf_dag(FIXTURE).items
    with pytest.raises(InputError, match="--limit, --window and --sample apply to flat traces"):
        import_trace(FIXTURE, "aiperf_dag", Filters(limit=3))
    orchestrator_first = write(tmp_path, [json.dumps({"session_id": "o", "orchestrator": True, "spawns": ["z"]}),
                                          json.dumps(GOOD)])  # fmt: skip
    assert detect_format(str(orchestrator_first)) == "aiperf_dag"


def test_a_replay_on_the_emulator_reuses_what_the_ideal_says(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    """The fixture against the sglang emulator, one request at a time, waits scaled to 0: every
    request's realised cached tokens equal its ideal (the longest prefix it shares with a prompt
    sent before), except where the ideal is the whole prompt (a spawn template played again sends
    the same text): an engine computes a prompt's last token even when it has seen it all, so
    there the cache gives one token less. Forks reuse their parent's whole prompt."""
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    plan = import_aiperf_dag(FIXTURE)
    table = replay_one_at_a_time(plan, emu.url, str(tmp_path / "runs"))
    assert table.num_rows == 17
    rows = {r["node"]: r for r in table.to_pylist()}
    assert [rows[n]["prompt_tokens_est"] for n in NODES] == [it.prompt_tokens for it in plan.items]
    repeats = set()
    for node, r in rows.items():
        if r["ideal_cached_tokens_est"] == r["prompt_tokens_est"]:
            repeats.add(node.rsplit("/", 1)[-1])
            assert r["cached_tokens"] == r["prompt_tokens_est"] - 1, node
        else:
            assert r["cached_tokens"] == r["ideal_cached_tokens_est"], node
    assert repeats == {"checker.t0", "scout.t0"}
    assert sum(n.endswith("checker.t0") and rows[n]["ideal_cached_tokens_est"] == 11 for n in rows) == 3
    for fork, parent in (("plan.t1>audit.t0", "plan.t1"), ("plan.t2>review-a.t0", "plan.t2"),
                         ("plan.t2>review-a.t1", "plan.t2>review-a.t0")):  # fmt: skip
        assert rows[fork]["cached_tokens"] >= rows[parent]["prompt_tokens_est"]
    firsts = sorted(
        rows[n]["ideal_cached_tokens_est"] for n in ("plan.t2>review-a.t0", "plan.t2>review-b.t0")
    )
    # the first sibling reuses its parent's prompt; the second also the parent's reply stand-in
    # (32 words) and the words the two share ("Review the plan for")
    assert firsts == [104, 104 + 32 + 4]
    for child, parents in (("plan.t2", ("plan.t1", "plan.t0/scout.t1")), ("plan.t2>review-b.t1",
                           ("plan.t2>review-b.t0", "plan.t2>review-b.t0/checker.t0"))):  # fmt: skip
        for p in parents:  # a join went out after every sub-agent it waits for had ended
            assert rows[child]["sent_ns"] >= rows[p]["sent_ns"] + rows[p]["e2e_ns"]


def test_an_unknown_child_is_named_by_its_place(tmp_path: Path) -> None:
    rows = [{"session_id": "o", "orchestrator": True, "rounds": [{"spawns": ["a"]}, {"spawns": ["a", "ghost"]}]},
            {"session_id": "a", "turns": [{"messages": user("x")}]}]  # fmt: skip
    with pytest.raises(InputError, match=r"line 1: rounds\[1\]\.spawns\[1\]: 'ghost' is not a session_id"):
        import_aiperf_dag(write(tmp_path, rows))
    rows[0] = {"session_id": "o", "orchestrator": True, "spawns": ["a", "ghost"]}
    with pytest.raises(InputError, match=r"line 1: spawns\[1\]: 'ghost' is not a session_id"):
        import_aiperf_dag(write(tmp_path, rows))
    rows = [{"session_id": "a", "turns": [{"messages": user("x"), "spawns": ["b", "ghost"]}, {"messages": user("y")}]},
            {"session_id": "b", "turns": [{"messages": user("z")}]}]  # fmt: skip
    with pytest.raises(InputError, match=r"line 1: turns\[0\]\.spawns\[1\]: 'ghost'"):
        import_aiperf_dag(write(tmp_path, rows))


def test_tool_time_scale_scales_the_delays_and_the_offsets_they_sum_to() -> None:
    from swarm.replay.formats import scale_waits

    plan = import_aiperf_dag(FIXTURE)
    assert any(it.gap_s for it in plan.items)
    half = scale_waits(plan, 0.5)
    assert [it.gap_s for it in half.items] == pytest.approx([it.gap_s / 2 for it in plan.items])
    assert [it.offset_s for it in half.items] == pytest.approx([it.offset_s / 2 for it in plan.items])
