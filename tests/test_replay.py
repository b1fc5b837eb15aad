"""Replay and interchange: swarm runs and public traces in, Mooncake out."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sending import replay_run, send_replay

from swarm.emulator.http_server import EmulatorThread
from swarm.errors import InputError
from swarm.launch import execute_run
from swarm.record import RequestRecord
from swarm.replay.export import export_mooncake, mooncake_lines
from swarm.replay.formats import import_trace
from swarm.replay.from_run import plan_from_run
from swarm.replay.reading import Filters, parse_window
from swarm.runtime.context import ResolvedTarget
from swarm.runtime.replay_source import item_messages
from swarm.runtime.specs import RunSpec, TargetSpec
from swarm.trace.manifest import RunManifest
from swarm.trace.reader import read_requests
from swarm.workload.arrival import ArrivalSpec
from swarm.workload.prefix import block_hashes
from swarm.workload.workload import MixEntry, WorkloadSpec

#: the first 300 requests of the Mooncake conversation trace (source and licence: data/README.md)
MOONCAKE = Path(__file__).resolve().parent / "data" / "mooncake_conversation_first300.jsonl"


@pytest.fixture
def recorded_run(emulator: Callable[..., EmulatorThread], tmp_path: Path) -> tuple[str, str]:
    """A small synthetic-context swarm run (built-in profile, tree of thought) against sglang."""
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    spec = RunSpec(
        workload=WorkloadSpec(
            agents=6,
            mix=[MixEntry(profile="math_reasoner", topology="beam")],
            arrival=ArrivalSpec(process="constant", rate=20),
        ),
        targets=[TargetSpec(name="orig", url=emu.url, engine="sglang")],
        output_dir=str(tmp_path / "runs"),
        executor="inprocess",
    )
    result = execute_run(spec)
    return result.run_dir, emu.url


def test_dependent_replay_reproduces_structure_lengths_and_prompt_hashes(
    recorded_run: tuple[str, str], emulator: Callable[..., EmulatorThread], tmp_path: Path
) -> None:
    run_dir, _ = recorded_run
    plan = plan_from_run(run_dir)
    assert plan.default_mode == "dependent" and plan.notes == []
    assert all(item.prompt_parts is not None for item in plan.items)  # rebuilt from spec + seed
    fresh = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    result = replay_run(
        plan,
        [TargetSpec(name="again", url=fresh.url, engine="sglang")],
        speed=4.0,
        output_dir=str(tmp_path / "replays"),
    )
    manifest = RunManifest.read(result.run_dir)
    assert manifest.kind == "replay" and manifest.replay_of is not None
    assert (
        manifest.replay_of["run_id"] == RunManifest.read(run_dir).run_id
        and manifest.replay_of["mode"] == "dependent"
    )

    def rows(d: str) -> dict[tuple[str, str], dict]:  # type: ignore[type-arg]
        return {(r["session_id"], r["node"]): r for r in read_requests(d).to_pylist()}

    original, again = rows(run_dir), rows(result.run_dir)
    assert original.keys() == again.keys()
    for k, o in original.items():
        a = again[k]
        assert a["parent_nodes"] == o["parent_nodes"] and a["depth"] == o["depth"] and a["role"] == o["role"]
        assert a["prompt_tokens_est"] == o["prompt_tokens_est"] == a["prompt_tokens"]
        assert a["block_hashes"] == o["block_hashes"]
        # a child is sent only after its parents' replayed requests finished
        for p in a["parent_nodes"]:
            parent = again[(k[0], p)]
            assert a["sent_ns"] >= parent["sent_ns"] + parent["e2e_ns"]


def test_replay_without_rebuildable_prompts_keeps_lengths_and_sharing(
    recorded_run: tuple[str, str], emulator: Callable[..., EmulatorThread]
) -> None:
    run_dir, _ = recorded_run
    plan = plan_from_run(run_dir)
    plan.items = [dataclasses.replace(it, prompt_parts=None, prompt_roles=None) for it in plan.items]
    emu = emulator(engine="sglang", timing="zero", cache_capacity_tokens=None)
    records: list[RequestRecord] = []
    target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")
    records, _ = send_replay(plan, target, mode="dependent", speed=10)
    original = {r["request_id"]: r for r in read_requests(run_dir).to_pylist()}
    assert sorted(r.identity.request_id for r in records) == sorted(original)
    # the prefix each prompt shares with those sent before it (in the replay's own order, which
    # a busy machine may change) is the one the original block hashes give, to the 64-token block
    earlier: list[list[int]] = []
    for r in sorted(records, key=lambda r: r.sent_ns):
        o = original[r.identity.request_id]
        assert r.prompt_tokens == o["prompt_tokens_est"]
        blocks = list(o["block_hashes"])
        shared = max((_leading_equal(blocks, e) for e in earlier), default=0)
        earlier.append(blocks)
        assert r.ideal_cached_tokens_est is not None
        assert shared * 64 <= r.ideal_cached_tokens_est <= (shared + 1) * 64, (
            shared,
            r.ideal_cached_tokens_est,
        )


def _leading_equal(a: list[int], b: list[int]) -> int:
    """How many leading (chained) block hashes two prompts share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def mooncake_ideal(rows: list[dict]) -> list[int]:  # type: ignore[type-arg]
    """Longest prefix (tokens) each request shares with an earlier one, from hash_ids alone."""

    def blocks(r: dict) -> list[tuple[int, int]]:  # type: ignore[type-arg]
        n = r["input_length"]
        return [(h, min(512, n - 512 * k)) for k, h in enumerate(r["hash_ids"])]

    out = []
    for i, r in enumerate(rows):
        best = 0
        mine = blocks(r)
        for prev in rows[:i]:
            shared = 0
            for (h1, n1), (h2, n2) in zip(mine, blocks(prev), strict=False):
                if h1 != h2:
                    break
                shared += min(n1, n2)
                if n1 != n2:
                    break
            best = max(best, shared)
        out.append(best)
    return out


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_mooncake_first_300_cached_tokens_equal_the_trace_ideal(
    engine: str, emulator: Callable[..., EmulatorThread]
) -> None:
    plan = import_trace(MOONCAKE, "mooncake", Filters(limit=300))
    rows = [json.loads(line) for line, _ in zip(MOONCAKE.open(), range(300), strict=False)]
    ideal = mooncake_ideal(rows)
    emu = emulator(engine=engine, timing="zero", cache_capacity_tokens=None)
    records: list[RequestRecord] = []
    target = ResolvedTarget("t", emu.url, engine, "openai-chat", "m")
    # in order, one at a time, so the server admits them in the order the ideal assumes
    records, _ = send_replay(plan, target, mode="timed", speed=1e6, max_in_flight=1)
    assert len(records) == 300 and all(r.ok for r in records)
    records.sort(key=lambda r: int(r.identity.request_id.rsplit(":", 1)[1]))
    for r, row, want in zip(records, rows, ideal, strict=True):
        assert r.prompt_tokens == row["input_length"]
        capped = min(want, row["input_length"] - 1)  # an engine always computes the last token
        expected = capped if engine == "sglang" else capped // 32 * 32
        assert r.cached_tokens == expected, (row, r.cached_tokens, expected)
        assert r.ideal_cached_tokens_est == want  # the client's own accounting agrees


def test_export_then_import_keeps_lengths_timestamps_and_sharing(recorded_run: tuple[str, str]) -> None:
    run_dir, _ = recorded_run
    buf = io.StringIO()
    n = export_mooncake(run_dir, buf)
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert n == len(lines) == read_requests(run_dir).num_rows
    assert lines[0]["timestamp"] == 0 and all(
        len(x["hash_ids"]) == -(-x["input_length"] // 512) for x in lines
    )
    assert len({h for x in lines for h in x["hash_ids"]}) < sum(
        len(x["hash_ids"]) for x in lines
    )  # shared blocks
    path = Path(run_dir) / "export.jsonl"
    path.write_text(buf.getvalue())
    plan = import_trace(path, "mooncake")
    assert [it.prompt_tokens for it in plan.items] == [x["input_length"] for x in lines]
    assert [round(it.offset_s * 1000) for it in plan.items] == [x["timestamp"] for x in lines]
    # the imported prompts, exported again, have the same block-sharing structure
    again = list(
        mooncake_lines(
            (
                int(it.offset_s * 1e9),
                it.prompt_tokens,
                it.max_tokens,
                block_hashes(" ".join(m.content for m in item_messages(it)).split()),
            )
            for it in plan.items
        )
    )
    assert [x["hash_ids"] for x in again] == [x["hash_ids"] for x in lines]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n{"timestamp": 5, "input_len',
            "line 2: not valid JSON",
        ),
        ('{"timestamp": 0, "output_length": 2, "hash_ids": [1]}\n', "line 1: missing field 'input_length'"),
        (
            '{"timestamp": 9, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n{"timestamp": 3, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n',
            "line 2: timestamp 0.003 s is earlier",
        ),
        (
            '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2, 3]}\n',
            "line 1: 3 hash ids but input_length 600 allows at most 2",
        ),
        (
            '{"timestamp": 0, "input_length": -4, "output_length": 2, "hash_ids": []}\n',
            "line 1: field 'input_length' must be a non-negative integer",
        ),
    ],
)
def test_bad_mooncake_lines_are_named(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, "t.jsonl", text)
    with pytest.raises(InputError) as err:
        import_trace(path, "mooncake")
    assert str(path) in str(err.value) and needle in str(err.value)


def test_skip_bad_lines_counts_them(tmp_path: Path) -> None:
    good = '{"timestamp": %d, "input_length": 40, "output_length": 2, "hash_ids": [7]}\n'
    path = write(tmp_path, "t.jsonl", good % 0 + "{oops\n" + good % 10 + "[1,2]\n")
    plan = import_trace(path, "mooncake", skip_bad_lines=True)
    assert len(plan.items) == 2 and plan.notes and "skipped 2 bad line(s)" in plan.notes[0]


def test_csv_importers_and_filters(tmp_path: Path) -> None:
    azure = write(
        tmp_path, "azure.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.1805900,396,109\n2023-11-16 18:15:50.0000000,879,32\n",
    )  # fmt: skip
    plan = import_trace(azure, "azure")
    assert [it.prompt_tokens for it in plan.items] == [374, 396, 879]
    assert [round(it.offset_s, 3) for it in plan.items] == [0.0, 0.5, 3.319]
    burst = write(
        tmp_path, "burst.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type,Session ID\n"
        "5,ChatGPT,472,18,490,Conversation log,s1\n6.5,GPT-4,1087,230,1317,Conversation log,s2\n9,GPT-4,20,5,25,API log,s1\n",
    )  # fmt: skip
    plan = import_trace(burst, "burstgpt", Filters(window=parse_window("1:5")))
    assert [it.prompt_tokens for it in plan.items] == [1087, 20] and plan.items[0].offset_s == 0.0
    assert [it.identity.session_id for it in plan.items] == ["s2", "s1"]
    assert len(import_trace(burst, "burstgpt", Filters(limit=1)).items) == 1
    missing = write(tmp_path, "bad.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n")
    with pytest.raises(InputError, match=r"bad.csv: line 1: missing column\(s\) \['GeneratedTokens'\]"):
        import_trace(missing, "azure")
    sampled = import_trace(MOONCAKE, "mooncake", Filters(sample=0.5, limit=100))
    assert len(sampled.items) == 100


def test_replay_cli_on_a_trace_and_bad_input(tmp_path: Path, emulator_process: Callable[..., object]) -> None:
    emu = emulator_process("--engine", "trtllm", "--timing", "zero")
    trace = write(
        tmp_path, "t.jsonl",
        "".join(json.dumps({"timestamp": i * 10, "input_length": 700, "output_length": 3, "hash_ids": [0, i + 1]}) + "\n" for i in range(20)),
    )  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "swarm", "replay", str(trace), "--target", f"trt={emu.url}", "--speed", "10", "--json", "--executor", "inprocess"],  # type: ignore[attr-defined]
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["replay_of"]["format"] == "mooncake" and result["targets"]["trt"]["requests"] == 20
    # 19 of 20 prompts share block 0 (512 tokens) with an earlier one
    assert result["targets"]["trt"]["cache_hit_ratio"] == pytest.approx(19 * 512 / (20 * 700))
    bad = subprocess.run(
        [sys.executable, "-m", "swarm", "replay", str(write(tmp_path, "b.jsonl", "{nope\n")), "--target", f"x={emu.url}", "--executor", "inprocess"],  # type: ignore[attr-defined]
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert (
        bad.returncode == 2
        and "b.jsonl: line 1: not valid JSON" in bad.stderr
        and "Traceback" not in bad.stderr
    )


def _timed_plan(offsets_s: list[float], tokens: int = 100):  # type: ignore[no-untyped-def]
    from swarm.replay.plan import ReplayItem, ReplayPlan

    items = [
        ReplayItem(index=i, offset_s=o, prompt_tokens=tokens, max_tokens=2, block_ids=(i % 3,))
        for i, o in enumerate(offsets_s)
    ]
    return ReplayPlan(items=items, source="test", source_format="synthetic")


def test_timed_replay_keeps_recorded_offsets_and_never_sends_early(
    emulator: Callable[..., EmulatorThread],
) -> None:
    emu = emulator(engine="sglang", timing="zero")
    offsets = [0.0, 0.0, 0.0, 0.04, 0.04, 0.1, 0.3, 2.4]  # bursts, and one past the preparation lead
    records: list[RequestRecord] = []
    target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")
    records, outcome = send_replay(_timed_plan(offsets), target, mode="timed", speed=2.0)
    assert outcome.requests == len(offsets) == len(records)
    assert all(r.status == "ok" for r in records)
    by_index = sorted(records, key=lambda r: r.scheduled_ns)
    first = by_index[0].scheduled_ns
    # scheduled times are exactly the recorded offsets divided by the speed
    assert [round((r.scheduled_ns - first) / 1e6) for r in by_index] == [round(o / 2 * 1e3) for o in offsets]
    assert all(r.queue_ns >= 0 for r in records)  # never before its time
    # requests sharing leading blocks get the ideal of what was sent before them
    assert [r.ideal_cached_tokens_est for r in by_index][:3].count(0) == 3


def test_stopping_a_replay_returns_what_was_sent(emulator: Callable[..., EmulatorThread]) -> None:
    emu = emulator(engine="sglang", timing="zero")
    records: list[RequestRecord] = []
    target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")

    records, outcome = send_replay(_timed_plan([0.0, 0.05, 60.0, 120.0]), target, stop_after_s=0.3)
    assert outcome.requests == 2 and outcome.interrupted
    assert len(records) == 2
