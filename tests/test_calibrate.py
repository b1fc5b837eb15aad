"""``swarm calibrate``: a probe of a running server recovers its step model; the file it writes
serves a twin (``swarm emulate --calibration``) and is refused, naming the field, when it is not
one; a server that stops answering mid-probe leaves what was measured, said so.

The server measured is ``swarm emulate`` in its own process (so the probe's client and the
server do not share an interpreter) with step parameters set away from the defaults.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from swarm.clients.calibrate import ProbePlan, calibrate
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.http_server import EmulatorThread
from swarm.engines.calibration import Calibration, DecodePoint, StepModel, fit_step_model, load_calibration
from swarm.errors import InputError

SWARM = [sys.executable, "-m", "swarm.cli"]
#: the step model the server runs (ms): none of them the default, and steps long enough that
#: a busy machine's late wake-ups (a millisecond or so) stay small beside them
KNOWN = {"step_base_ms": 20.0, "prefill_ms_per_token": 0.05, "decode_ms_per_seq": 1.0, "decode_ms_per_context_token": 0.002}
FALLBACK = StepModel(
    step_base_ms=4.0, prefill_ms_per_token=0.02, prefill_ms_per_cached_token=0.0, decode_ms_per_seq=0.05,
    decode_ms_per_context_token=0.0,
)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Calibration, Path]:
    """The sglang twin of a server with ``KNOWN`` steps and 200,000 tokens of KV, measured once
    through the command line."""
    from swarm.emulator.process import EmulatorProcess

    args = [f"--{k.replace('_', '-')}={v}" for k, v in KNOWN.items()]
    with EmulatorProcess(["--engine", "sglang", "--kv-capacity-tokens", "200000", *args]) as server:
        out = tmp_path_factory.mktemp("cal") / "sglang.yaml"
        done = subprocess.run(
            [*SWARM, "calibrate", str(server.url), "-o", str(out), "--budget", "120"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "decode: batches of" in done.stderr  # progress, phase by phase
    return load_calibration(out), out


def test_a_probe_recovers_the_servers_step_model_within_ten_percent(measured: tuple[Calibration, Path]) -> None:
    calibration, _ = measured
    assert calibration.complete and calibration.engine == "sglang"
    got = calibration.parameters
    for name, value in KNOWN.items():
        assert getattr(got, name) == pytest.approx(value, rel=0.10), (name, got)
    # every measured point and each fit's residuals are kept beside the parameters
    plan = ProbePlan()
    assert len(calibration.decode_points) == len(plan.batches) + len(plan.context_words)  # short, then long contexts
    assert {p.cached_tokens > 0 for p in calibration.prefill_points} == {True, False}  # cold and cached
    itl = [p.itl_ms for p in calibration.decode_points]
    assert calibration.decode_fit is not None and calibration.decode_fit.rms_ms < 0.1 * sum(itl) / len(itl)
    assert calibration.prefill_fit is not None and len(calibration.prefill_fit.residuals_ms) == len(
        calibration.prefill_points
    )
    # what the server states of itself (SGLang's server info) is the twin's too
    assert calibration.stated["kv_capacity_tokens"] == 200_000
    assert calibration.stated["chunked_prefill_size"] == 8192


def test_the_file_serves_its_twin_and_flags_override_it(measured: tuple[Calibration, Path]) -> None:
    calibration, path = measured
    twin = EmulatorConfig(**calibration.settings())
    assert twin.engine == "sglang" and twin.kv_capacity_tokens == 200_000
    assert twin.step_base_ms == calibration.parameters.step_base_ms
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    refused = subprocess.run(
        [*SWARM, "emulate", "--calibration", str(path), "--engine", "trtllm"], capture_output=True, text=True, env=env
    )
    assert refused.returncode == 2 and "engine: sglang, not trtllm" in refused.stderr


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cal.yaml"
    path.write_text(text)
    return path


def test_a_file_that_is_not_a_calibration_is_refused_naming_the_field(
    measured: tuple[Calibration, Path], tmp_path: Path
) -> None:
    _, good = measured
    data = yaml.safe_load(good.read_text())
    cases = {
        "format: [unclosed\n": "not YAML at line",
        yaml.safe_dump({**data, "format": "something-else"}): "format: 'something-else'",
        yaml.safe_dump({**data, "version": 2}): "version: 2; this swarm reads version 1",
        yaml.safe_dump({**data, "parameters": {**data["parameters"], "decode_ms_per_seq": -1}}): (
            "parameters.decode_ms_per_seq: Input should be greater than or equal to 0"
        ),
        yaml.safe_dump({**data, "surprise": 1}): "surprise: unknown key",
    }
    for text, message in cases.items():
        with pytest.raises(InputError, match="cal.yaml: " + message.replace("[", r"\[").replace("(", r"\(")):
            load_calibration(_write(tmp_path, text))
    with pytest.raises(InputError, match="engine: sglang, not vllm"):
        load_calibration(good, "vllm")
    # a file written before the context term loads, the term 0 (the emulator's default)
    del data["parameters"]["decode_ms_per_context_token"]
    for point in data["decode_points"]:
        del point["context_tokens"]
    assert load_calibration(_write(tmp_path, yaml.safe_dump(data))).parameters.decode_ms_per_context_token == 0.0


def test_without_long_contexts_the_decode_line_has_no_context_term() -> None:
    """Short prompts whose contexts differ by a token or two (a nonce's tokenization) cannot
    tell a context cost from a sequence cost: the line keeps the sequence cost, the context
    term keeps the fallback's, and a note says so."""
    points = [DecodePoint(batch=b, context_tokens=30 + b % 2, itl_ms=20.0 + 1.0 * b, gaps=100) for b in (1, 2, 4, 8, 16, 32)]
    notes: list[str] = []
    model, _, fit, _ = fit_step_model([], points, FALLBACK, notes)
    assert model.decode_ms_per_seq == pytest.approx(1.0) and model.step_base_ms == pytest.approx(20.0)
    assert model.decode_ms_per_context_token == FALLBACK.decode_ms_per_context_token
    assert fit is not None and any("no long contexts measured" in n for n in notes)


def test_a_server_that_stops_mid_probe_leaves_what_was_measured(emulator: Callable[..., EmulatorThread]) -> None:
    server = emulator(engine="trtllm", **KNOWN)
    said: list[str] = []

    def progress(text: str) -> None:
        said.append(text)
        if text.startswith("decode"):
            server.stop()  # the server goes as the decode phase begins

    plan = ProbePlan(prompt_words=(16, 256), repeats=1, batches=(1, 4))
    result = asyncio.run(calibrate(server.url, plan=plan, fallback=FALLBACK, on_progress=progress))
    assert not result.complete
    assert len(result.prefill_points) == 4 and result.decode_points == []
    assert any("ended early in decode" in n and "4 prefill and 0 decode points" in n for n in result.notes)
    assert result.parameters.decode_ms_per_seq == FALLBACK.decode_ms_per_seq  # nothing to fit: the default
    assert any("decode: fewer than two batch sizes" in n for n in result.notes)
    assert any("ended early in decode" in s for s in said)  # said as it happened


def test_a_llamacpp_twin_is_measured_within_its_slots_and_its_checkpoints_seen(tmp_path: Path) -> None:
    """A llama.cpp twin of 4 slots with a sliding-window model (a repeated prompt recomputes its
    last 5 tokens; a prompt's tail in steps of their own, which emit no token but the last):
    the probe states the slots and the window, sends no decode batch larger than the slots,
    and recovers the step, the prefill cost and the discount of a step that emits nothing."""
    from swarm.emulator.process import EmulatorProcess

    known = {"step_base_ms": 20.0, "prefill_ms_per_token": 0.05, "decode_ms_per_seq": 1.0, "step_emit_ms": 8.0}
    args = [f"--{k.replace('_', '-')}={v}" for k, v in known.items()]
    with EmulatorProcess(["--engine", "llamacpp", "--parallel", "4", "--swa-tokens", "512", *args]) as server:
        done = subprocess.run(
            [*SWARM, "calibrate", str(server.url), "-o", str(tmp_path / "llama.yaml"), "--budget", "120"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    calibration = load_calibration(tmp_path / "llama.yaml", "llamacpp")
    assert calibration.stated == {"parallel": 4, "swa_tokens": 512}
    assert max(p.batch for p in calibration.decode_points) == 4
    got = calibration.parameters
    assert got.step_base_ms == pytest.approx(20.0, rel=0.10), got
    assert got.prefill_ms_per_token == pytest.approx(0.05, rel=0.10), got
    # a busy machine slows the long prompts' repeats unevenly: the fit's own error bars say how far
    # its discount may be off, and they must hold the truth (and be no wider than half of it)
    emit_error = calibration.standard_errors()["step_emit_ms"]
    assert abs(got.step_emit_ms - 8.0) <= max(0.2 * 8.0, min(3 * emit_error, 4.0)), (got, emit_error)
    assert not got.step_overlap
    twin = EmulatorConfig(**calibration.settings())
    assert twin.engine == "llamacpp" and twin.parallel == 4 and twin.swa_tokens == 512


def test_the_probe_measures_how_many_prompts_the_cache_holds(tmp_path: Path) -> None:
    """A server whose prefix cache holds 4,000 tokens of an 8,000-token pool (the room a
    hybrid model's blocks leave prompts can be less than the pool it states): fresh prompts
    one by one until the first is lost, and the twin's cache (and KV) take what was measured."""
    from swarm.emulator.process import EmulatorProcess

    args = ["--engine", "sglang", "--kv-capacity-tokens", "8000", "--cache-tokens", "4000", "--step-base-ms", "1"]
    with EmulatorProcess(args) as server:
        done = subprocess.run(
            [*SWARM, "calibrate", str(server.url), "-o", str(tmp_path / "cap.yaml"), "--budget", "120"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    calibration = load_calibration(tmp_path / "cap.yaml")
    probe = calibration.capacity
    assert probe is not None and probe.lost is not None and probe.held >= 1
    assert (probe.held - 1) * probe.prompt_tokens < 4000 < probe.lost * probe.prompt_tokens + probe.prompt_tokens
    assert calibration.stated["cache_capacity_tokens"] == probe.tokens == pytest.approx(4000, rel=0.15)
    assert calibration.stated["kv_capacity_tokens"] == probe.tokens
    assert any("the server states 8000: prompts of this size see another room" in n for n in calibration.notes)


#: a Gemma 3 270M ``config.json``, the fields vLLM's layer grouping reads
GEMMA3_CONFIG = {
    "model_type": "gemma3_text", "num_hidden_layers": 18, "sliding_window": 512,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
}  # fmt: skip


def test_a_vllm_pool_is_its_stated_blocks_in_the_models_kv_groups(tmp_path: Path) -> None:
    """A vLLM twin serving Gemma 3's layout (a pool of 199 usable blocks of 128, 5 sliding-window
    groups beside the full-attention one) states 200 blocks; with the model's config.json the
    probe takes the pool and the layout as they are (no capacity phase), and the twin it writes
    is the server's."""
    import json

    from swarm.emulator.process import EmulatorProcess

    (tmp_path / "config.json").write_text(json.dumps(GEMMA3_CONFIG))
    pool = 199 * 128
    args = [
        "--engine", "vllm", "--kv-capacity-tokens", str(pool), "--cache-tokens", str(pool), "--swa-tokens", "512",
        "--swa-groups", "5", "--step-base-ms", "1",
    ]  # fmt: skip
    with EmulatorProcess(args) as server:
        done = subprocess.run(
            [*SWARM, "calibrate", str(server.url), "-o", str(tmp_path / "v.yaml"), "--budget", "60",
             "--model-config", str(tmp_path / "config.json")],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    calibration = load_calibration(tmp_path / "v.yaml", "vllm")
    assert calibration.capacity is None and "capacity:" not in done.stderr
    assert {k: calibration.stated[k] for k in ("kv_capacity_tokens", "cache_capacity_tokens", "swa_tokens", "swa_groups")} == {
        "kv_capacity_tokens": pool, "cache_capacity_tokens": pool, "swa_tokens": 512, "swa_groups": 5,
    }  # fmt: skip
    twin = EmulatorConfig(**calibration.settings())
    assert (twin.swa_tokens, twin.swa_groups, twin.kv_capacity_tokens) == (512, 5, pool)


def test_vllms_layer_grouping_gives_the_twins_sliding_window_groups() -> None:
    from swarm.engines.vllm import hybrid_layout

    assert hybrid_layout(GEMMA3_CONFIG) == (512, 5)  # 3 full, 15 sliding: groups of 3
    assert hybrid_layout({"text_config": GEMMA3_CONFIG}) == (512, 5)  # a multimodal model's text half
    # Gemma 3 1B's older config: every 6th of 26 layers full (4), 22 sliding in groups of 4, padded
    assert hybrid_layout({"num_hidden_layers": 26, "sliding_window": 512, "sliding_window_pattern": 6}) == (512, 6)
    gpt_oss = {"num_hidden_layers": 24, "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12}
    assert hybrid_layout(gpt_oss) == (128, 1)
    assert hybrid_layout({"num_hidden_layers": 32, "sliding_window": None}) == (0, 0)  # full attention only
    assert "layer pattern is unknown" in str(hybrid_layout({"num_hidden_layers": 32, "sliding_window": 4096}))
    all_sliding = {"num_hidden_layers": 4, "sliding_window": 4096, "layer_types": ["sliding_attention"] * 4}
    assert "no full-attention group" in str(hybrid_layout(all_sliding))
    two_full = {"num_hidden_layers": 30, "sliding_window": 512, "layer_types": ["full_attention"] * 20 + ["sliding_attention"] * 10}
    assert "2 KV groups of full-attention layers" in str(hybrid_layout(two_full))


def test_a_fits_standard_errors_match_the_noise_it_was_given() -> None:
    """Ordinary least squares on a line with noise of known size (seeded): the slope's standard
    error is the textbook ``σ / sqrt(Σ (x - x̄)²)`` within a tenth, the intercept's likewise; a
    fit with no spare point has none."""
    import numpy as np

    from swarm.engines.calibration import standard_errors

    rng = np.random.default_rng(7)
    x = np.linspace(0, 100, 400)
    y = 2.0 + 3.0 * x + rng.normal(0.0, 1.5, x.size)
    design = np.column_stack([np.ones_like(x), x])
    solution, *_ = np.linalg.lstsq(design, y, rcond=None)
    got = standard_errors(design, y - design @ solution, ["intercept", "slope"])
    spread = float(np.sum((x - x.mean()) ** 2))
    assert got["slope"] == pytest.approx(1.5 / np.sqrt(spread), rel=0.1)
    assert got["intercept"] == pytest.approx(1.5 * np.sqrt(1 / x.size + x.mean() ** 2 / spread), rel=0.1)
    assert standard_errors(design[:2], np.zeros(2), ["intercept", "slope"]) == {}
