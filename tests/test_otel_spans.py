"""OpenTelemetry GenAI span files (the layout kubernetes-sigs/inference-perf replays, its
docs/otel_trace_replay.md) in: every LLM span one request with its recorded messages and token
counts, sessions by trace, dependencies and waits as inference-perf derives them (tool spans
inside the waits), bad spans named with their line, and a replay on the emulator whose realised
reuse equals the ideal.

Fixture (tests/data/otel_genai, source in its SOURCE.md), one file, two traces. Trace 4bf9...:
an ``invoke_agent`` release-planner (spans[0]) with, in start order,

item  span (place, line)          start s  end s  parents     gap s  why
0     c0a..01 (spans[1], 22)      0.1      1.6    ()          0      first call
-     tool search_docs (spans[2]) 1.7      2.9                       execute_tool: not sent
1     c0a..02 (spans[3], 61)      3.0      4.5    (0,)        1.4    repeats 0's tool call (ids) and text
2     c0a..03 (spans[5], 98)      4.7      6.0    (1,)        0.2    researcher sub-agent; timing edge
3     c0a..04 (spans[6], 118)     4.8      7.0    (1,)        0.3    parallel to 2 (which had not ended)
4     c0a..05 (spans[7], 138)     7.5      9.0    (1, 2, 3)   0.5    repeats 1, 2, 3 (0 through 1)

and trace 0af7... recorded without content: e..01 (600 input tokens), e..02 (an error, output 0,
max_tokens 64; spans[10] repeats it exactly and is dropped), parent e..01 by timing, gap 3 s.
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
from swarm.replay.formats import import_trace
from swarm.replay.otel_spans import DEFAULT_MAX_TOKENS, import_otel_spans
from swarm.replay.plan import ReplayItem
from swarm.replay.reading import Filters
from swarm.runtime.replay_source import group_sessions, item_messages

DATA = Path(__file__).parent / "data" / "otel_genai"
FIXTURE = DATA / "release-agent.json"
T1, T2 = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"
NODES = ["c0a0000000000001", "c0a0000000000002", "c0a0000000000003", "c0a0000000000004", "c0a0000000000005",
         "e000000000000001", "e000000000000002"]  # fmt: skip


def spans() -> list[dict[str, Any]]:
    return list(json.loads(FIXTURE.read_text())["spans"])


def words(item: ReplayItem) -> list[str]:
    return [w for m in item_messages(item) for w in m.content.split()]


def test_every_llm_span_is_one_request_with_the_files_token_counts() -> None:
    plan = import_otel_spans(FIXTURE)
    assert plan.source_format == "otel_genai" and plan.default_mode == "dependent"
    assert [it.identity.node for it in plan.items] == NODES
    by_id = {s["span_id"]: s["attributes"] for s in spans()}
    for it in plan.items:
        attrs = by_id[it.identity.node]
        assert it.prompt_tokens == attrs["gen_ai.usage.input_tokens"]
        assert it.max_tokens == (attrs["gen_ai.usage.output_tokens"] or attrs["gen_ai.request.max_tokens"])
    assert sum(it.prompt_tokens for it in plan.items) == 31 + 78 + 22 + 21 + 140 + 600 + 650
    assert sum(it.max_tokens for it in plan.items) == 24 + 18 + 14 + 15 + 20 + 40 + 64
    assert [(s.key, len(s.items)) for s in group_sessions(plan.items)] == [(T1, 5), (T2, 2)]
    assert plan.notes == [
        "1 execute_tool span(s) not sent: their time is in the waits of the calls after them",
        "1 span(s) repeating another's times and attributes dropped",
        "1 LLM span(s) recorded as errors replayed like the others",
    ]


def test_dependencies_waits_and_agents_follow_the_spans() -> None:
    items = import_otel_spans(FIXTURE).items
    assert [it.parents for it in items] == [(), (0,), (1,), (1,), (1, 2, 3), (), (5,)]
    # 1.4 s: the 1.2 s search_docs tool run and 0.2 s around it, from the first call's end
    assert [it.gap_s for it in items] == pytest.approx([0, 1.4, 0.2, 0.3, 0.5, 0, 3.0])
    assert [it.offset_s for it in items] == pytest.approx([0, 2.9, 4.6, 4.7, 7.4, 0, 5.0])
    assert [it.identity.depth for it in items] == [0, 0, 1, 1, 0, 0, 0]
    assert [it.identity.role for it in items] == ["release-planner"] * 2 + ["researcher"] * 2 + [
        "release-planner", "", ""
    ]  # fmt: skip
    assert [it.identity.branch for it in items][2:4] == [0, 1]  # two calls after the same parent
    assert items[4].identity.parent_nodes == ("c0a0000000000002", "c0a0000000000003", "c0a0000000000004")
    assert items[1].identity.request_id == f"{T1}:c0a0000000000002"


def test_prompts_are_the_recorded_messages_so_prefixes_are_shared_as_recorded() -> None:
    items = import_otel_spans(FIXTURE).items
    first, second, fan_in = (item_messages(items[i]) for i in (0, 1, 4))
    assert [m.role for m in first] == ["system", "user"]
    assert second[: len(first)] == first
    assert second[2].role == "assistant" and second[2].content == (
        'I will look up the release blockers first.\nsearch_docs({"query": "release blockers"})'
    )
    assert second[3].role == "user" and second[3].content.startswith("Blockers: billing")  # a tool result
    assert words(items[4])[: len(words(items[1]))] == words(items[1])
    assert [m.content for m in fan_in[7:9]] == [
        "Measured runs of the v7 migration took about forty minutes.",
        "Index rebuilds took two hours on the last three releases.",
    ]
    blind = item_messages(items[5])  # no content recorded: 600 words of its own
    assert len(blind) == 1 and len(blind[0].content.split()) == 600
    assert words(items[6])[0] != words(items[5])[0]


def write(tmp_path: Path, span_list: list[dict[str, Any]], name: str = "trace.json", **top: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({**top, "spans": span_list}, indent=1))
    return path


def chat(span_id: str, start: float, end: float, **attrs: Any) -> dict[str, Any]:
    return {
        "trace_id": "t", "span_id": span_id, "name": "chat m", "start_time": f"2026-01-01T00:00:{start:09.6f}Z",
        "end_time": f"2026-01-01T00:00:{end:09.6f}Z", "attributes": {"gen_ai.operation.name": "chat", **attrs},
    }  # fmt: skip


def test_older_attributes_and_fallbacks(tmp_path: Path) -> None:
    span_list = [
        chat("a", 0, 1, **{"gen_ai.prompt": "plain question text", "gen_ai.completion": "abcdefghijklmnop"}),
        chat("b", 2, 3, **{"gen_ai.prompt.0.role": "developer", "gen_ai.prompt.0.content": "be brief",
                           "gen_ai.prompt.1.content": "plain question text", "gen_ai.completion.0.content": "x y"}),
        chat("c", 4, 5, **{"gen_ai.input.messages": [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]}),
        chat("d", 6, 7),  # nothing to send
        {**chat("e", 8, 9), "name": "chat m", "attributes": {"gen_ai.input.messages": '[{"role": "user", "content": "yo"}]'}},
    ]  # fmt: skip
    plan = import_otel_spans(write(tmp_path, span_list))
    assert [it.identity.node for it in plan.items] == ["a", "b", "c", "e"]  # a "chat ..." name is enough
    a, b, c, _ = plan.items
    assert [m.content for m in item_messages(a)] == ["plain question text"] and a.prompt_tokens == 3
    assert a.max_tokens == 16 // 4  # no output count: the output's characters / 4, as inference-perf
    assert [(m.role, m.content) for m in item_messages(b)] == [
        ("system", "be brief"),
        ("user", "plain question text"),
    ]
    assert b.max_tokens == 1 and c.max_tokens == DEFAULT_MAX_TOKENS
    assert plan.notes == [
        "1 LLM span(s) with neither input messages nor input_tokens left out",
        f"2 call(s) record no output nor max_tokens: sent with max_tokens={DEFAULT_MAX_TOKENS}",
    ]


def test_a_nested_call_and_tool_call_ids_are_dependencies_and_ancestors_are_not_repeated(
    tmp_path: Path,
) -> None:
    call = {"id": "call-9", "type": "function", "function": {"name": "ls", "arguments": {"dir": "/"}}}
    span_list = [
        chat("p", 0, 10, **{"gen_ai.input.messages": [{"role": "user", "content": "outer"}]}),
        {**chat("n", 1, 2, **{"gen_ai.input.messages": [{"role": "user", "content": "inner"}]}), "parent_span_id": "p"},
        chat("q", 11, 12, **{"gen_ai.input.messages": [{"role": "user", "content": "list"}],
                             "gen_ai.output.messages": [{"role": "assistant", "parts": [
                                 {"type": "tool_call", "id": "call-9", "name": "ls", "arguments": {"dir": "/"}}]}]}),
        chat("r", 13, 14, **{"gen_ai.input.messages": [{"role": "user", "content": "list"},
                                                       {"role": "assistant", "content": None, "tool_calls": [call]},
                                                       {"role": "tool", "tool_call_id": "call-9", "content": "bin etc"}]}),
    ]  # fmt: skip
    items = import_otel_spans(write(tmp_path, span_list)).items
    # n runs inside p but is nested under it (no wait: it starts before p ends); q waits by timing
    # for the latest-starting call that had ended when it started (n); r repeats q's tool call
    assert [it.parents for it in items] == [(), (0,), (1,), (2,)]
    assert items[1].gap_s == 0 and item_messages(items[3])[1].content == 'ls({"dir": "/"})'


def test_folders_trace_ids_and_bad_files(tmp_path: Path) -> None:
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(FIXTURE.read_text())
    plan = import_otel_spans(tmp_path)
    assert len(plan.items) == 14
    assert [s.key for s in group_sessions(plan.items)][:4] == [T1, T2, f"{T1}@b.json", f"{T2}@b.json"]
    assert plan.items[8].parents == (7,)  # indices run on
    (tmp_path / "c.json").write_text('{"spans": [{"span_id": 3}]}')
    with pytest.raises(InputError, match=r"c\.json: line 1, spans\[0\]: span_id 3"):
        import_otel_spans(tmp_path)
    skipped = import_trace(tmp_path, "otel_genai", skip_bad_lines=True)
    assert len(skipped.items) == 14 and skipped.notes[0].startswith("skipped 1 bad trace file(s); first: ")
    spare = tmp_path / "spare"
    spare.mkdir()
    (spare / "x.json").write_text(
        json.dumps({"trace_id": "file-id", "spans": [chat("a", 0, 1, **{"gen_ai.usage.input_tokens": 5})]})
    )
    lone = json.loads((spare / "x.json").read_text())
    del lone["spans"][0]["trace_id"]
    (spare / "x.json").write_text(json.dumps(lone))
    assert import_otel_spans(spare).items[0].identity.session_id == "file-id"  # the file's trace_id


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('"span_id": "c0a0000000000002"', '"span_id": ""', r"line 61, spans\[3\]: span_id ''"),
        ('"2026-03-02T09:00:03.000000Z"', '"yesterday"', r"line 61, spans\[3\]: start_time 'yesterday'"),
        ('"end_time": "2026-03-02T09:00:06.000000Z"', '"end_time": "2026-03-02T09:00:04.000000Z"',
         r"line 98, spans\[5\]: end_time .* is before start_time"),
        ('"gen_ai.usage.input_tokens": 22', '"gen_ai.usage.input_tokens": -22',
         r"line 98, spans\[5\]: attributes.gen_ai.usage.input_tokens -22"),
        ('"gen_ai.usage.output_tokens": 15', '"gen_ai.usage.output_tokens": 1.5',
         r"line 118, spans\[6\]: attributes.gen_ai.usage.output_tokens 1.5"),
        ('"span_id": "c0a0000000000004"', '"span_id": "c0a0000000000003"',
         r"line 118, spans\[6\]: span_id 'c0a0000000000003' already used by spans\[5\]"),
        ('"gen_ai.input.messages": "[{\\"role\\": \\"system\\", \\"content\\": \\"You are a researcher. Report facts with sources.\\"}, {\\"role\\": \\"user\\", \\"content\\": \\"How long does the billing',
         '"gen_ai.input.messages": "[{\\"rol\\": \\"system\\", \\"content\\": \\"You are a researcher. Report facts with sources.\\"}, {\\"role\\": \\"user\\", \\"content\\": \\"How long does the billing',
         r"line 98, spans\[5\]: attributes.gen_ai.input.messages\[0\]: expected a message object with a 'role'"),
        ('"gen_ai.output.messages": "[{\\"role\\": \\"assistant\\", \\"parts', '"gen_ai.output.messages": "[{\\"role\\" \\"assistant\\", \\"parts',
         r"line 61, spans\[3\]: attributes.gen_ai.output.messages: not valid JSON"),
        ('"parent_span_id": "a1f0000000000002",\n      "name": "chat qwen3-8b",\n      "kind": "SPAN_KIND_CLIENT",\n      "start_time": "2026-03-02T09:00:04.7',
         '"parent_span_id": 7,\n      "name": "chat qwen3-8b",\n      "kind": "SPAN_KIND_CLIENT",\n      "start_time": "2026-03-02T09:00:04.7',
         r"line 98, spans\[5\]: parent_span_id 7"),
    ],
)  # fmt: skip
def test_bad_spans_are_named_with_their_line(tmp_path: Path, old: str, new: str, message: str) -> None:
    text = FIXTURE.read_text()
    assert text.count(old) == 1, old
    bad = tmp_path / "bad.json"
    bad.write_text(text.replace(old, new))
    with pytest.raises(InputError, match=message) as err:
        import_otel_spans(bad)
    assert str(err.value).startswith(f"{bad}: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"spans": [\n {"span_id": }\n]}', r"line 2: not valid JSON"),
        ('[{"span_id": "a"}]', r'expected an object with a "spans" list'),
        ('{"spans": [{"span_id": "a", "name": "invoke_agent x"}]}', r"no LLM call .*: nothing to replay"),
        ('{"spans": ["x"]}', r"spans\[0\]: expected a span object, got str"),
        ('{"spans": [{"span_id": "a", "attributes": [1]}]}', r"spans\[0\]: attributes: expected an object"),
    ],
)
def test_bad_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        import_otel_spans(bad)
    assert str(bad) in str(err.value)


def test_detection_and_the_one_entry_point(tmp_path: Path) -> None:
    from swarm.replay.formats import detect_format

    assert detect_format(str(FIXTURE)) == "otel_genai"
    assert detect_format(str(DATA)) == "otel_genai"  # a folder whose first .json holds spans
    agentic = Path(__file__).parent / "data" / "agentic_coding" / "fixture-subagents.json"
    mentions = tmp_path / "mentions.json"  # an agentic-coding trace whose text names "spans"
    mentions.write_text(
        agentic.read_text().replace('"id": "fixture-0001"', '"id": "fixture-0001", "spans": 3')
    )
    assert detect_format(str(mentions)) == "agentic_coding"
    assert import_trace(FIXTURE, "otel_genai").items == import_otel_spans(FIXTURE).items
    with pytest.raises(InputError, match="--limit, --window and --sample apply to flat traces"):
        import_trace(FIXTURE, "otel_genai", Filters(sample=0.5))


def test_a_replay_on_the_emulator_reuses_what_the_ideal_says(
    emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    """The fixture against the sglang emulator, one request at a time, waits scaled to 0: every
    request's realised cached tokens equal its ideal: a call whose input repeats an earlier call's
    messages reuses that call's whole prompt (the recorded output after it differs from what the
    emulator generated), the researchers only the words their system prompt shares."""
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    plan = import_otel_spans(FIXTURE)
    table = replay_one_at_a_time(plan, emu.url, str(tmp_path / "runs"))
    assert table.num_rows == 7
    assert table["cached_tokens"].to_pylist() == table["ideal_cached_tokens_est"].to_pylist()
    rows = {r["node"]: r for r in table.to_pylist()}
    prompt = {it.identity.node: len(words(it)) for it in plan.items}
    assert rows["c0a0000000000002"]["cached_tokens"] == prompt["c0a0000000000001"] == 18
    assert rows["c0a0000000000005"]["cached_tokens"] == prompt["c0a0000000000002"] == 43
    for child, parents in (("c0a0000000000005", ("c0a0000000000003", "c0a0000000000004")),):
        for p in parents:  # the fan-in went out after both researchers had ended
            assert rows[child]["sent_ns"] >= rows[p]["sent_ns"] + rows[p]["e2e_ns"]
