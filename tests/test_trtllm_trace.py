"""TensorRT-LLM execution traces in (issue 17): structure kept, bad events named, and a replay of
the published example, 50 sessions strong, whose realised reuse equals the ideal.

Fixtures (tests/data/trtllm, sources in tests/data/README.md): the published django example,
and a hand-written trace with nested parallel branches whose numbers are worked out below.
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
from swarm.replay.formats import import_trace
from swarm.replay.trtllm_trace import import_trtllm

DATA = Path(__file__).parent / "data" / "trtllm"
DJANGO = DATA / "django__django-16801.trace.json"
PARALLEL = DATA / "parallel-fixture.trace.json"


def test_the_published_example_round_trips() -> None:
    """4 assistant calls: prompts are the conversation's messages before each (system 2,269 +
    user 157 = 2,426, the recorded first prompt; then + the reply and the tool result each turn),
    outputs the recorded completion tokens, each call after the one before it and its tool's time."""
    events = json.loads(DJANGO.read_text())["events"]
    plan = import_trtllm(DJANGO)
    assert plan.default_mode == "dependent" and plan.source_format == "trtllm"
    calls = [e for e in events if e["event_type"] == "message" and e["role"] == "assistant"]
    tools = [e["duration_ms"] / 1000 for e in events if e["event_type"] == "tool_call"]
    assert (
        [it.max_tokens for it in plan.items]
        == [c["completion_tokens"] for c in calls]
        == [1444, 437, 205, 374]
    )
    assert [it.prompt_tokens for it in plan.items] == [
        2426,
        2426 + 1444 + 6869,
        10739 + 437 + 10,
        11186 + 205 + 213,
    ]
    assert (
        plan.items[0].prompt_tokens == calls[0]["prompt_tokens"]
    )  # no template tokens before the first reply
    assert [it.parents for it in plan.items] == [(), (0,), (1,), (2,)]
    assert len(tools) == 4  # the last tool ran after the last call: no call waits for it
    assert [it.gap_s for it in plan.items] == pytest.approx([0.0, *tools[:3]])
    for it in plan.items:  # a prompt's text has exactly its token count in words
        assert sum(len(p.split()) for p in it.prompt_parts or ()) == it.prompt_tokens
        assert it.identity.session_id == "0fb03a01-d629-4270-8a36-f871f895db86"
    assert import_trace(DJANGO, "trtllm").items == plan.items


def test_parallel_branches_nest_and_join() -> None:
    """The fixture: call 0 on the trunk, a 500 ms tool, then branches [0] and [1]; [1] waits
    250 ms more, calls, and opens [1,0] and [1,1]; after both regions close, the trunk calls
    once more, waiting for the last call of every branch.

    call  branch  prompt                         parents    gap     offset
    0     ()      100 + 20 = 120                 ()         0       0
    1     (0,)    100 + 15 = 115                 (0,)       0.5     0.5
    2     (1,)    100 + 25 = 125                 (0,)       0.75    0.75
    3     (1,0)   100 + 10 = 110                 (2,)       0       0.75
    4     (1,1)   100 + 10 = 110                 (2,)       0       0.75
    5     ()      100+20+10+30+40 = 200          (1, 3, 4)  0       0.75
    """
    plan = import_trtllm(PARALLEL)
    items = plan.items
    assert [it.prompt_tokens for it in items] == [120, 115, 125, 110, 110, 200]
    assert [it.parents for it in items] == [(), (0,), (0,), (2,), (2,), (1, 3, 4)]
    assert [it.gap_s for it in items] == pytest.approx([0, 0.5, 0.75, 0, 0, 0])
    assert [it.offset_s for it in items] == pytest.approx([0, 0.5, 0.75, 0.75, 0.75, 0.75])
    assert [(it.identity.depth, it.identity.branch) for it in items] == [
        (0, 0),
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
        (0, 0),
    ]
    assert items[5].identity.parent_nodes == ("c1.m2", "c3.m2", "c4.m2")
    # one text per system_prompt_id: tmpl-a shared by calls 0-2; tmpl-b and the unnamed one apart
    systems = [it.prompt_parts[0] for it in items if it.prompt_parts]
    assert systems[0] == systems[1] == systems[2] != systems[3] != systems[4]
    assert len({it.identity.system_prompt_id for it in items[:3]}) == 1
    # the reply of call 0 (10 tokens) is in call 5's prompt; the reasoning of call 1 is nowhere
    assert items[5].prompt_roles == ("system", "user", "assistant", "user", "user")
    assert "drop_kv_cache" in plan.notes[0]


def test_a_folder_of_traces_is_one_session_each(tmp_path: Path) -> None:
    for f in (DJANGO, PARALLEL):
        (tmp_path / f.name).write_text(f.read_text())
    plan = import_trtllm(tmp_path)
    assert len({it.identity.session_id for it in plan.items}) == 2
    assert len(plan.items) == 4 + 6
    assert plan.items[4].parents == () and plan.items[5].parents == (4,)  # indices run on


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e[2].update(event_type="mesage"), r"line 20, event 2: event_type 'mesage'"),
        (lambda e: e[2].pop("completion_tokens"), r"event 2: completion_tokens is missing"),
        (lambda e: e[1].update(tokens=-3), r"event 1: tokens -3"),
        (lambda e: e[3].update(duration_ms="slow"), r"event 3: duration_ms 'slow'"),
        (lambda e: e[0].update(branch_path="trunk"), r"event 0: branch_path 'trunk'"),
        (
            lambda e: e.insert(0, {"event_type": "parallel_end", "branch_path": []}),
            r"event 0: parallel_end without",
        ),
        (lambda e: e.insert(0, {"event_type": "parallel_start", "branch_path": []}), r"never closed"),
        (lambda e: e[1].update(role="robot"), r"event 1: role 'robot'"),
    ],
)
def test_bad_events_are_named_with_their_line(
    tmp_path: Path, change: Callable[[list], None], message: str
) -> None:
    data = json.loads(DJANGO.read_text())
    change(data["events"])
    bad = tmp_path / "bad.trace.json"
    bad.write_text(json.dumps(data, indent=2))
    with pytest.raises(InputError, match=message) as err:
        import_trtllm(bad)
    assert str(bad) in str(err.value)


def test_not_json_and_not_a_trace_are_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.trace.json"
    broken.write_text('{"trace_id": "x",\n "events": [\n {"event_type": }\n]}')
    with pytest.raises(InputError, match=r"broken.trace.json: line 3: not valid JSON"):
        import_trtllm(broken)
    other = tmp_path / "other.trace.json"
    other.write_text('[{"timestamp": 0}]')
    with pytest.raises(InputError, match='expected an object with an "events" list'):
        import_trtllm(other)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"no \.trace\.json files"):
        import_trtllm(empty)


def test_fifty_sessions_of_the_example_reuse_what_the_ideal_says(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    """``swarm replay django.trace.json --copies 50`` against the sglang emulator, one request
    at a time (so the engine sees prompts in the order the ideal index does): every request's
    realised cached tokens equal its ideal, and a session shares only the system prompt with
    the others: a copy's first call reuses the 2,269-token system prompt and nothing more."""
    from sending import replay_run

    from swarm.runtime.specs import TargetSpec
    from swarm.trace.reader import read_requests

    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    plan = import_trtllm(DJANGO)
    result = replay_run(
        plan, [TargetSpec(name="emu", url=emu.url, engine="sglang")], copies=50, max_in_flight=1,
        output_dir=str(tmp_path / "runs"),
    )  # fmt: skip
    assert result.manifest.status.value == "complete"
    table = read_requests(result.run_dir)
    assert table.num_rows == 4 * 50
    assert pc.all(pc.equal(table["status"], "ok")).as_py()
    cached = table["cached_tokens"].to_pylist()
    ideal = table["ideal_cached_tokens_est"].to_pylist()
    assert cached == ideal
    firsts = table.filter(pc.equal(table["node"], "c0.m2"))
    assert firsts.num_rows == 50
    reused = sorted(set(firsts["ideal_cached_tokens_est"].to_pylist()))
    assert reused == [0, 2269]  # the first session found nothing; every other one, the system prompt


def test_replay_tells_the_format_from_the_name_and_keeps_the_structure(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    url = emulator(engine="sglang", timing="zero").url
    done = subprocess.run(
        [
            sys.executable, "-m", "swarm.cli", "replay", str(PARALLEL), "--target", f"emu={url}", "--engine", "sglang",
            "--copies", "2", "--output", str(tmp_path / "runs"), "--json", "--executor", "inprocess",
        ],
        capture_output=True, text=True, timeout=120, env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["replay_of"]["format"] == "trtllm" and out["replay_of"]["mode"] == "dependent"
    assert out["targets"]["emu"]["requests"] == 12
    from swarm.trace.reader import read_requests

    rows = read_requests(out["run_dir"]).to_pylist()
    by_node: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_node.setdefault(r["session_id"], {})[r["node"]] = r
    for session in by_node.values():  # the join call went out after every branch call had ended
        join = session["c0.m5"]
        for node in ("c1.m2", "c3.m2", "c4.m2"):
            branch = session[node]
            assert join["sent_ns"] >= branch["sent_ns"] + branch["e2e_ns"]
        assert join["parent_nodes"] == ["c1.m2", "c3.m2", "c4.m2"]


def test_tool_time_scale_multiplies_the_waits() -> None:
    from swarm.replay.formats import scale_waits

    plan = import_trtllm(PARALLEL)
    half = scale_waits(plan, 0.5)
    assert [it.gap_s for it in half.items] == pytest.approx([0, 0.25, 0.375, 0, 0, 0])
    assert [it.offset_s for it in half.items] == pytest.approx([0, 0.25, 0.375, 0.375, 0.375, 0.375])
    assert [it.parents for it in half.items] == [it.parents for it in plan.items]
    assert all(it.gap_s == 0 for it in scale_waits(plan, 0).items)


def test_replay_tells_every_structured_format_from_the_file(tmp_path: Path) -> None:
    from swarm.replay.formats import detect_format

    data = Path(__file__).parent / "data"
    assert detect_format(str(DJANGO)) == "trtllm"
    assert detect_format(str(DATA)) == "trtllm"  # a folder of *.trace.json
    assert detect_format(str(data / "bailian" / "two-conversations_blksz_16.jsonl")) == "bailian"
    assert detect_format(str(data / "mooncake_conversation_first300.jsonl")) == "mooncake"
    assert detect_format(str(data / "agentic_coding" / "fixture-subagents.json")) == "agentic_coding"
    folder = tmp_path / "coding"
    folder.mkdir()
    (folder / "a.json").write_text((data / "agentic_coding" / "fixture-subagents.json").read_text())
    assert detect_format(str(folder)) == "agentic_coding"
    for fmt, source in (
        ("bailian", data / "bailian" / "two-conversations_blksz_16.jsonl"),
        ("agentic_coding", data / "agentic_coding" / "fixture-subagents.json"),
    ):
        assert import_trace(source, fmt).items  # reachable through the one entry point


def test_two_traces_with_one_id_stay_two_sessions_and_a_bad_file_can_be_skipped(tmp_path: Path) -> None:
    for name in ("a.trace.json", "b.trace.json"):
        (tmp_path / name).write_text(DJANGO.read_text())
    plan = import_trtllm(tmp_path)
    sessions = {it.identity.session_id for it in plan.items}
    assert len(sessions) == 2 and len({it.identity.request_id for it in plan.items}) == 8
    # nothing of one is the other's: the example names no system_prompt_id, so even its system
    # prompt is its own (with an id, traces share it: see the parallel fixture)
    first, second = plan.items[0].prompt_parts or (), plan.items[4].prompt_parts or ()
    assert first[0] != second[0] and first[1] != second[1]
    (tmp_path / "c.trace.json").write_text('{"trace_id": "c", "events": [{"event_type": "oops"}]}')
    with pytest.raises(InputError, match=r"c\.trace\.json"):
        import_trtllm(tmp_path)
    skipped = import_trace(tmp_path, "trtllm", skip_bad_lines=True)
    assert len(skipped.items) == 8 and "skipped 1 bad trace file" in skipped.notes[-1]


def test_a_wait_before_a_region_whose_branches_never_call_is_kept(tmp_path: Path) -> None:
    """A 4 s tool on the trunk, then a region without num_branches whose branch only adds a
    message; the trunk's next call still waits the 4 s (and 1 s of trunk tool time inside)."""
    events = [
        {"event_type": "message", "conversation_id": 0, "role": "system", "message_index": 0, "tokens": 10},
        {"event_type": "message", "conversation_id": 0, "role": "user", "message_index": 1, "tokens": 5},
        {"event_type": "message", "conversation_id": 0, "role": "assistant", "message_index": 2, "completion_tokens": 3},
        {"event_type": "tool_call", "branch_path": [], "duration_ms": 4000},
        {"event_type": "parallel_start", "branch_path": []},
        {"event_type": "message", "branch_path": [0], "conversation_id": 1, "role": "user", "message_index": 0, "tokens": 2},
        {"event_type": "tool_call", "branch_path": [], "duration_ms": 1000},
        {"event_type": "parallel_end", "branch_path": []},
        {"event_type": "message", "conversation_id": 0, "role": "assistant", "message_index": 3, "completion_tokens": 3},
    ]  # fmt: skip
    f = tmp_path / "wait.trace.json"
    f.write_text(json.dumps({"trace_id": "w", "events": events}))
    plan = import_trtllm(f)
    assert [it.parents for it in plan.items] == [(), (0,)]
    assert plan.items[1].gap_s == pytest.approx(4.0)  # the longer of the branch's 4 s and the trunk's 1 s


def test_tool_time_scale_is_refused_where_it_would_do_nothing(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    from sending import replay_run

    from swarm.runtime.specs import TargetSpec

    target = [TargetSpec(name="emu", url=emulator(engine="sglang", timing="zero").url, engine="sglang")]
    mooncake = import_trace(
        Path(__file__).parent / "data" / "mooncake_conversation_first300.jsonl", "mooncake"
    )
    with pytest.raises(InputError, match="records no waits"):
        replay_run(mooncake, target, tool_time_scale=0.5, output_dir=str(tmp_path))
    bailian = import_trace(
        Path(__file__).parent / "data" / "bailian" / "two-conversations_blksz_16.jsonl", "bailian"
    )
    with pytest.raises(InputError, match="use --mode dependent"):
        replay_run(bailian, target, tool_time_scale=0.5, output_dir=str(tmp_path))


def test_a_sweep_folder_is_not_a_replay_source(tmp_path: Path) -> None:
    from swarm.replay.formats import detect_format

    (tmp_path / "sweep.json").write_text("{}")
    with pytest.raises(InputError, match="a sweep folder"):
        detect_format(str(tmp_path))
