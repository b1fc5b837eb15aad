"""Random bytes and random specs fed to every parser: only clean errors come out.

"Clean" means the parser's own error type, whose message names what was wrong (InputError for
files, flags and specs; SSEError / ChunkError for a response stream), never a KeyError,
TypeError, IndexError or a crash, and never a hang.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarm.analysis.metrics import parse_slos
from swarm.clients.dialects import ChunkError, StreamDecoder
from swarm.clients.exchange import describe_error_body, parse_retry_after
from swarm.clients.sse import SSEError, SSEParser
from swarm.emulator.faults import FaultSpec
from swarm.engines.registry import get_engine
from swarm.errors import InputError
from swarm.replay.formats import import_trace
from swarm.replay.reading import parse_window
from swarm.runtime.specs import RunSpec
from swarm.workload.agent_profile import load_profile
from swarm.workload.arrival import parse_arrival
from swarm.workload.specfiles import load_yaml, validate
from swarm.workload.topology import load_topology
from swarm.workload.workload import WorkloadSpec

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# bytes that look like a response stream often enough to reach the decoders
STREAM_PIECES = [
    b"data: ", b"\n", b"\r\n", b"\n\n", b"[DONE]", b": keep-alive\n", b"event: x\n", b"\r",
    b'{"choices":[{"delta":{"content":"a"}}]}', b'{"choices":[]}', b'{"text":"a","meta_info":{}}',
    b'{"error":{"message":"boom"}}', b"{", b'"', b"null", b"[1,2]", b'{"choices":[{"delta":null}]}',
    b'{"usage":{"prompt_tokens":"x"}}', b'{"choices":[{"text":5}]}',
]  # fmt: skip
stream_bytes = st.lists(st.one_of(st.binary(max_size=64), st.sampled_from(STREAM_PIECES)), max_size=40)


@FUZZ
@given(pieces=stream_bytes, dialect=st.sampled_from(["openai-chat", "openai-completions", "sglang-generate"]),
       keep_text=st.booleans(), cut=st.integers(min_value=1, max_value=7))  # fmt: skip
def test_stream_parsers_raise_only_their_own_errors(
    pieces: list[bytes], dialect: str, keep_text: bool, cut: int
) -> None:
    data = b"".join(pieces)
    parser = SSEParser(max_line_bytes=512)
    decoder = StreamDecoder(dialect, get_engine("sglang"), keep_text=keep_text)
    try:
        for start in range(0, len(data), cut):
            payloads = [p for p in parser.feed(data[start : start + cut]) if p != b"[DONE]"]
            if payloads:
                decoder.feed_many(payloads)
        for payload in parser.close():
            if payload != b"[DONE]":
                decoder.feed(payload)
    except (SSEError, ChunkError) as exc:
        assert str(exc)


@FUZZ
@given(text=st.text(max_size=80))
def test_flag_parsers_raise_only_input_errors(text: str) -> None:
    for parse in (FaultSpec.parse, parse_arrival, parse_window):
        try:
            parse(text)
        except InputError as exc:
            assert str(exc)
    try:
        parse_slos([text])
    except ValueError as exc:  # report/compare turn it into an InputError
        assert "--slo" in str(exc)
    after = parse_retry_after(text)
    assert after is None or after >= 0


@FUZZ
@given(
    body=st.binary(max_size=300),
    content_type=st.sampled_from(["application/json", "text/html", "", "text/plain"]),
)
def test_error_bodies_always_describe(body: bytes, content_type: str) -> None:
    assert isinstance(describe_error_body(body, content_type), str)


# JSON-like values for spec documents
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=True)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
spec_keys = st.sampled_from(
    ["workload", "targets", "agents", "mix", "seed", "arrival", "retries", "on_failure", "max_error_rate",
     "timeouts", "name", "generator", "params", "graph", "system_prompt", "output_tokens", "think_time_s",
     "profile", "topology", "length", "branching", "dist", "value", "mean", "nodes", "edges"]
)  # fmt: skip
spec_documents = st.dictionaries(spec_keys | st.text(max_size=8), json_values, max_size=6)


@FUZZ
@given(doc=spec_documents)
def test_spec_models_raise_only_input_errors(doc: dict[str, Any]) -> None:
    for model in (RunSpec, WorkloadSpec):
        try:
            validate(model, doc, "fuzz.yaml")
        except InputError as exc:
            assert str(exc).startswith("fuzz.yaml")


@FUZZ
@given(doc=spec_documents | st.text(max_size=200))
def test_spec_files_raise_only_input_errors(doc: dict[str, Any] | str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
        for load in (load_yaml, load_profile, load_topology):
            try:
                load(path)
            except InputError as exc:
                assert str(path) in str(exc) or "spec.yaml" in str(exc), str(exc)


@FUZZ
@given(lines=st.lists(st.one_of(st.text(max_size=60), json_values.map(json.dumps)), max_size=8),
       fmt=st.sampled_from(["mooncake", "azure", "burstgpt", "bailian"]))  # fmt: skip
def test_trace_importers_raise_only_input_errors(lines: list[str], fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("trace.jsonl" if fmt in ("mooncake", "bailian") else "trace.csv")
        path.write_text("\n".join(lines), encoding="utf-8")
        for skip in (False, True):
            try:
                import_trace(path, fmt, skip_bad_lines=skip)
            except InputError as exc:
                assert "trace." in str(exc)


EVENT_FIELDS = {
    "event_type": st.sampled_from(
        ["message", "tool_call", "parallel_start", "parallel_end", "drop_kv_cache", "x"]
    ),
    "branch_path": st.one_of(st.lists(st.integers(-1, 3), max_size=3), json_values),
    "conversation_id": st.one_of(st.integers(-1, 3), json_values),
    "message_index": st.one_of(st.integers(-1, 6), json_values),
    "role": st.sampled_from(["system", "user", "assistant", "tool", "x"]),
    "tokens": st.one_of(st.integers(-5, 50), json_values),
    "completion_tokens": st.one_of(st.integers(-1, 20), json_values),
    "reasoning_tokens": st.one_of(st.integers(-1, 30), json_values),
    "duration_ms": st.one_of(st.floats(allow_nan=True), json_values),
    "num_branches": st.one_of(st.integers(-1, 3), json_values),
    "system_prompt_id": st.one_of(st.text(max_size=4), json_values),
}
trtllm_events = st.lists(st.fixed_dictionaries({}, optional=EVENT_FIELDS), max_size=12)


@FUZZ
@given(events=trtllm_events, wrap=st.booleans())
def test_trtllm_traces_raise_only_input_errors(events: list[dict[str, Any]], wrap: bool) -> None:
    """Random events (and random top levels) of TensorRT-LLM execution traces: a plan or an
    InputError naming the file, nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.trace.json"
        doc: Any = {"trace_id": "f", "events": events} if wrap else events
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        try:
            import_trace(path, "trtllm")
        except InputError as exc:
            assert "fuzz.trace.json" in str(exc), str(exc)


@FUZZ
@given(doc=st.one_of(json_values, st.fixed_dictionaries(
    {"requests": st.lists(st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "t": json_values, "in": st.one_of(st.integers(-2, 300), json_values), "out": json_values,
        "hash_ids": st.one_of(st.lists(st.integers(-1, 9), max_size=6), json_values),
        "type": st.sampled_from(["s", "n", "subagent", 3]), "requests": json_values,
        "think_time": json_values, "api_time": json_values, "duration_ms": json_values,
    })), max_size=6)}, optional={"block_size": json_values, "id": json_values, "hash_id_scope": json_values},
)))  # fmt: skip
def test_agentic_coding_traces_raise_only_input_errors(doc: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.json"
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        try:
            import_trace(path, "agentic_coding")
        except InputError as exc:
            assert "fuzz.json" in str(exc), str(exc)


SESSIONS = ["a", "b", "c", "d"]
session_ids = st.one_of(st.sampled_from(SESSIONS), st.sampled_from(SESSIONS), json_values)
good_messages = st.lists(st.fixed_dictionaries({
    "role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]), "content": st.text(max_size=12),
}), min_size=1, max_size=3)  # fmt: skip
chat_messages = st.one_of(
    good_messages, good_messages, json_values,
    st.lists(st.fixed_dictionaries({}, optional={
        "role": st.sampled_from(["system", "user", "assistant", "tool", "", 3]),
        "content": st.one_of(st.text(max_size=12), json_values), "tool_calls": json_values, "tool_call_id": json_values,
        "parts": st.one_of(json_values, st.lists(st.fixed_dictionaries({}, optional={
            "type": st.sampled_from(["text", "tool_call", "tool_call_response", "blob", 1]), "content": json_values,
            "id": json_values, "name": json_values, "arguments": json_values,
        }), max_size=3)),
    }), max_size=4),
)  # fmt: skip
some = st.one_of(st.integers(1, 40), st.integers(1, 40), json_values)  # mostly valid counts and delays
dag_turn = st.fixed_dictionaries({"messages": chat_messages}, optional={
    "max_tokens": some, "delay": some, "extra": json_values,
    "forks": st.one_of(json_values, st.lists(st.one_of(session_ids, st.fixed_dictionaries(
        {"child": session_ids}, optional={"background": st.one_of(st.booleans(), json_values)})), max_size=3)),
    "spawns": st.one_of(json_values, st.lists(st.one_of(session_ids, st.fixed_dictionaries(
        {"children": st.lists(session_ids, max_size=2)}, optional={"join_at": st.one_of(st.integers(-1, 4), json_values)}
    )), max_size=3)),
})  # fmt: skip
valid_dag_line = st.fixed_dictionaries({
    "session_id": st.sampled_from(SESSIONS), "turns": st.lists(st.fixed_dictionaries({"messages": good_messages}, optional={
        "max_tokens": st.integers(1, 9), "delay": st.integers(0, 9),
        "forks": st.lists(st.sampled_from(SESSIONS), max_size=1),
        "spawns": st.lists(st.one_of(st.sampled_from(SESSIONS), st.fixed_dictionaries(
            {"children": st.lists(st.sampled_from(SESSIONS), max_size=2), "join_at": st.integers(1, 3)})), max_size=2),
    }), min_size=1, max_size=3),
}).map(json.dumps)  # fmt: skip
dag_lines = st.lists(st.one_of(
    valid_dag_line, valid_dag_line, st.text(max_size=40), json_values.map(json.dumps),
    st.fixed_dictionaries({"session_id": session_ids, "turns": st.one_of(st.lists(dag_turn, min_size=1, max_size=4),
                                                                       json_values)}, optional={
        "pre_session_spawns": st.one_of(st.lists(session_ids, max_size=2), json_values),
        "context_mode": st.sampled_from(["deltas_without_responses", "deltas_with_responses",
                                         "message_array_with_responses", "x"]),
    }).map(json.dumps),
    st.fixed_dictionaries({"session_id": session_ids, "orchestrator": st.just(True)}, optional={
        "spawns": st.lists(session_ids, max_size=2), "think_time_ms": some, "think_time_sigma": json_values,
        "rounds": st.one_of(st.integers(-1, 3), json_values, st.lists(st.fixed_dictionaries(
            {"spawns": st.lists(session_ids, max_size=2)}, optional={"think_time_ms": some}), max_size=2)),
    }).map(json.dumps),
), max_size=6)  # fmt: skip


@FUZZ
@given(lines=dag_lines)
def test_aiperf_dag_files_raise_only_input_errors(lines: list[str]) -> None:
    """Random conversations (forks, spawns, joins, orchestrators naming each other at random) of
    AIPerf DAG JSONL files: a plan or an InputError naming the file, nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.dag.jsonl"
        path.write_text("\n".join(lines), encoding="utf-8")
        for skip in (False, True):
            try:
                import_trace(path, "aiperf_dag", skip_bad_lines=skip)
            except InputError as exc:
                assert "fuzz.dag.jsonl" in str(exc), str(exc)


# starts (first two) before ends (last two): 1_767_225_605 s is 2026-01-01T00:00:05Z
SPAN_TIMES = [
    "2026-01-01T00:00:01Z",
    "2026-01-01T00:00:02.5+00:00",
    "2026-01-01T00:00:03",
    1_767_225_605 * 10**9,
]
valid_time = st.sampled_from(SPAN_TIMES)
times = st.one_of(valid_time, valid_time, valid_time, st.sampled_from(["soon", -1, None]), json_values)
span_ids = st.sampled_from(["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"])
otel_span = st.fixed_dictionaries({
    "span_id": st.one_of(span_ids, span_ids, span_ids, json_values),
    "start_time": times, "end_time": times,
    "attributes": st.one_of(json_values, st.fixed_dictionaries({
        "gen_ai.operation.name": st.sampled_from(["chat", "chat", "execute_tool", "invoke_agent", 3]),
    }, optional={
        "gen_ai.input.messages": st.one_of(chat_messages, chat_messages.map(json.dumps)),
        "gen_ai.output.messages": st.one_of(chat_messages, chat_messages.map(json.dumps)),
        "gen_ai.output.text": json_values, "gen_ai.prompt": json_values, "gen_ai.prompt.0.content": json_values,
        "gen_ai.completion.0.content": json_values, "gen_ai.agent.name": json_values,
        "gen_ai.usage.input_tokens": some, "gen_ai.usage.output_tokens": some, "gen_ai.request.max_tokens": some,
    })),
}, optional={
    "parent_span_id": st.one_of(st.sampled_from(["s1", "s2", None]), json_values),
    "trace_id": st.one_of(st.sampled_from(["t1", "t2"]), json_values),
    "name": st.sampled_from(["chat m", "invoke_agent a", "x"]), "status": json_values,
})  # fmt: skip
valid_span = st.fixed_dictionaries({
    "span_id": span_ids, "start_time": st.sampled_from(SPAN_TIMES[:2]), "end_time": st.sampled_from(SPAN_TIMES[2:]),
    "attributes": st.fixed_dictionaries({
        "gen_ai.operation.name": st.sampled_from(["chat", "chat", "execute_tool"]),
        "gen_ai.input.messages": st.one_of(good_messages, good_messages.map(json.dumps)),
    }, optional={
        "gen_ai.output.messages": st.one_of(good_messages, chat_messages), "gen_ai.output.text": st.text(max_size=9),
        "gen_ai.usage.input_tokens": st.integers(0, 30), "gen_ai.usage.output_tokens": st.integers(0, 30),
    }),
}, optional={"parent_span_id": st.sampled_from(["s1", "s2", None]), "trace_id": st.sampled_from(["t1", "t2"])})  # fmt: skip
otel_spans = st.one_of(
    st.lists(valid_span, max_size=6, unique_by=lambda s: str(s["span_id"])),
    st.lists(st.one_of(valid_span, otel_span, json_values), max_size=4),
)


@FUZZ
@given(doc=st.one_of(json_values, st.fixed_dictionaries(
    {"spans": otel_spans}, optional={"trace_id": json_values, "session_id": json_values})))  # fmt: skip
def test_otel_span_files_raise_only_input_errors(doc: Any) -> None:
    """Random spans (and random top levels) of OpenTelemetry GenAI span files: a plan or an
    InputError naming the file, nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.json"
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        try:
            import_trace(path, "otel_genai")
        except InputError as exc:
            assert "fuzz.json" in str(exc), str(exc)
