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
from swarm.clients.engine_profiles import get_profile
from swarm.clients.exchange import describe_error_body, parse_retry_after
from swarm.clients.sse import SSEError, SSEParser
from swarm.emulator.faults import FaultSpec
from swarm.errors import InputError
from swarm.replay.importers import import_trace, parse_window
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
    decoder = StreamDecoder(dialect, get_profile("sglang"), keep_text=keep_text)
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
