"""A calibration file: an engine twin's step model as ``swarm calibrate`` measured it on a server.

Place in the map (docs/architecture.md, "Engines"): written by ``clients.calibrate`` (the probe
and the fit), read by ``swarm emulate --calibration FILE`` (``settings`` become the
emulator's ``EmulatorConfig`` fields, flags given on the command line over them). The file is
YAML; ``format`` and ``version`` say what it is, and a reader refuses another version rather
than guess. Besides the fitted parameters it keeps every measured point and each fit's
residuals, so a user can see how well the straight lines hold.

The step model it fits is the emulator's (``emulator/engine_model.py``): one batch step lasts
``step_base_ms + prefill_ms_per_token × uncached prompt tokens + prefill_ms_per_cached_token ×
cached prompt tokens + decode_ms_per_seq × sequences + decode_ms_per_context_token × the
decoding sequences' context tokens`` (ms).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from swarm.errors import InputError

#: what ``format`` says, and the version of the layout this swarm writes and reads
FORMAT: Literal["swarm-calibration"] = "swarm-calibration"
VERSION: Literal[1] = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepModel(_Strict):
    """The fitted step model, in the emulator's own setting names (ms)."""

    step_base_ms: float = Field(ge=0, description="fixed cost of one step")
    prefill_ms_per_token: float = Field(ge=0, description="cost per uncached prompt token prefilled")
    prefill_ms_per_cached_token: float = Field(ge=0, description="cost per cached prompt token of a prefill")
    decode_ms_per_seq: float = Field(ge=0, description="cost per sequence in a step")
    decode_ms_per_context_token: float = Field(
        default=0.0, ge=0, description="cost per token of context of each decoding sequence in a step"
    )
    step_emit_ms: float = Field(
        default=0.0, ge=0, description="the part of step_base_ms only a step that emits a token pays"
    )
    step_overlap: bool = Field(
        default=False, description="a step lasts the larger of its fixed and its prompt compute cost, not their sum"
    )


class PrefillPoint(_Strict):
    """One request alone on the server: its prompt, what the server reported cached, its TTFT."""

    prompt_tokens: int = Field(ge=0)
    cached_tokens: int = Field(ge=0)
    ttft_ms: float = Field(ge=0)


class DecodePoint(_Strict):
    """``batch`` streams at once, each with about ``context_tokens`` of context while it
    decodes: the gap between their tokens once all decode (each stream's mean, the median over
    streams)."""

    batch: int = Field(ge=1)
    context_tokens: int = Field(default=0, ge=0, description="a stream's prompt plus half its output, the mean over streams")
    itl_ms: float = Field(ge=0)
    gaps: int = Field(ge=0, description="token gaps the median is over")


class CapacityProbe(_Strict):
    """The capacity phase: of fresh prompts of ``prompt_tokens`` sent one by one, the first was
    still cached after ``held`` of them and not after ``lost`` (None: never lost within reach)."""

    prompt_tokens: int = Field(ge=0)
    held: int = Field(ge=0)
    lost: int | None = None
    #: the cached tokens a held prompt came back with (its whole blocks; the last token computed)
    cached_tokens: int = Field(default=0, ge=0)

    @property
    def tokens(self) -> int:
        """The cache's room in prompt tokens: halfway between the prompts that held and those
        that did not. (A running prompt's last partial block, which a block cache keeps only
        while it runs, is counted: the room is what prompts of this size see.)"""
        upper = self.lost if self.lost is not None else self.held
        return int((self.held + upper) / 2 * self.prompt_tokens)


class Fit(_Strict):
    """A least-squares line: its points' residuals (measured minus fitted, ms) and their RMS."""

    residuals_ms: list[float]
    rms_ms: float = Field(ge=0)
    standard_errors: dict[str, float] = Field(
        default_factory=dict,
        description="each fitted parameter's standard error, in its own unit (ordinary least squares: "
        "sqrt of the diagonal of s² (XᵀX)⁻¹, s² the residual sum of squares over n − p of the points fitted on); "
        "empty where the fit was a search or had no spare point",
    )


def standard_errors(design: Any, residuals: Any, names: list[str]) -> dict[str, float]:
    """The standard error of each column's coefficient of an ordinary least-squares fit: the
    square root of the diagonal of ``s² (XᵀX)⁻¹``, ``s² = Σ residual² / (n − p)``. Empty when
    there is no spare point (``n ≤ p``) or the columns are not independent."""
    import numpy as np

    n, p = design.shape
    if n <= p:
        return {}
    try:
        inverse = np.linalg.inv(design.T @ design)
    except np.linalg.LinAlgError:
        return {}
    s2 = float(np.sum(np.asarray(residuals) ** 2)) / (n - p)
    return {name: float(np.sqrt(max(s2 * inverse[i, i], 0.0))) for i, name in enumerate(names)}


class HeldAgainst(_Strict):
    """The twin held against its engine: one sweep of each, the same ladder and workload
    (``swarm compare ENGINE_SWEEP TWIN_SWEEP --record-error FILE``). Every simulation of this
    twin states it beside its figures: a simulated figure carries at least this error."""

    engine_sweep: str = Field(description="the engine's sweep (its folder)")
    twin_sweep: str = Field(description="the twin's sweep (its folder)")
    recorded_at: str = Field(description="UTC, ISO 8601")
    errors: dict[str, float] = Field(
        description="per figure, the largest relative error (twin - engine) / engine over the loads "
        "measured on both, as a share (0.11: 11 %); hit_ratio in points of the ideal (0.02)"
    )
    cliff_steps: float | None = Field(
        default=None, description="the twin's eviction cliff minus the engine's, in ladder steps (none: a "
        "sweep without a cliff)",
    )  # fmt: skip


class Calibration(_Strict):
    """A calibration file (see the module docstring)."""

    format: Literal["swarm-calibration"] = FORMAT
    version: Literal[1] = VERSION
    engine: str = Field(description="the engine measured (its swarm name: sglang, trtllm, vllm, llamacpp)")
    url: str = Field(description="the server measured (credentials left out)")
    model: str | None = None
    measured_at: str = Field(description="UTC, ISO 8601")
    complete: bool = Field(description="false: the probe ended early (see notes) and the fit uses what it had")
    parameters: StepModel
    #: what the server states of itself, under the emulator's setting names (the KV for running
    #: requests, the block size, the scheduler's knobs under the engine's names)
    stated: dict[str, Any] = Field(default_factory=dict)
    prefill_points: list[PrefillPoint] = Field(default_factory=list)
    decode_points: list[DecodePoint] = Field(default_factory=list)
    prefill_fit: Fit | None = None
    decode_fit: Fit | None = None
    #: the client's own time in every TTFT: the cold prefill line's intercept less one step of
    #: one sequence (not a server cost; the twin leaves it out)
    client_overhead_ms: float | None = None
    #: how many fresh prompts the prefix cache held (``swarm calibrate``'s capacity phase)
    capacity: CapacityProbe | None = None
    notes: list[str] = Field(default_factory=list)
    #: the twin's sweep held against its engine's, once a user has compared them
    held_against: HeldAgainst | None = None

    def standard_errors(self) -> dict[str, float]:
        """Each fitted parameter's standard error (the decode fit's, then the prefill fit's):
        how far the measured points let the value move."""
        return {**(self.decode_fit.standard_errors if self.decode_fit else {}),
                **(self.prefill_fit.standard_errors if self.prefill_fit else {})}  # fmt: skip

    def settings(self) -> dict[str, Any]:
        """The emulator's settings for this twin: its engine, the fitted step model, what the
        server stated."""
        return {"engine": self.engine, **self.parameters.model_dump(), **self.stated}


def line_fit(xs: list[float], ys: list[float]) -> tuple[float, float, Fit]:
    """Least squares ``y = intercept + slope × x``: (intercept, slope, its residuals). Needs two
    distinct ``xs``."""
    import numpy as np

    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if np.unique(x).size < 2:
        raise ValueError("a line needs two distinct points")
    slope, intercept = np.polyfit(x, y, 1)
    residuals = y - (intercept + slope * x)
    return float(intercept), float(slope), Fit(
        residuals_ms=[round(float(r), 4) for r in residuals], rms_ms=float(np.sqrt(np.mean(residuals**2)))
    )


def fit_step_model(
    prefill: list[PrefillPoint],
    decode: list[DecodePoint],
    fallback: StepModel,
    notes: list[str],
    tail_breaks: tuple[int, ...] = (),
) -> tuple[StepModel, Fit | None, Fit | None, float | None]:
    """The step model from the measured points (``fallback``'s value, with a line in ``notes``,
    for what they cannot give):

    - decode: the mean token gap of ``B`` streams at once, each with ``x`` tokens of context, is
      one step of ``B`` sequences, ``itl = step_base_ms + decode_ms_per_seq × B +
      decode_ms_per_context_token × B × x`` (least squares over short and long contexts; with
      no long context measured, no context term and the fallback's, with a note);
    - prefill: a request alone takes the steps its prompt is cut into (one, or more where the
      engine computes a prompt's tail apart: ``tail_breaks``, as the scheduler's
      ``prefill_tail_breaks``), each of one sequence, plus the client's own overhead ``o``.
      Two step models are fitted and the overlap kept when its median absolute residual is
      under ``OVERLAP_BETTER`` of the sum's: the sum, ``ttft = o +
      Σ (step_base_ms + decode_ms_per_seq) + prefill_ms_per_token × uncached +
      prefill_ms_per_cached_token × cached`` (least squares; through ``o = 0`` where it would
      be negative), and the overlap (``step_overlap``),
      ``ttft = o + Σ max(step_base_ms + decode_ms_per_seq, prefill_ms_per_token × chunk)``
      (``prefill_ms_per_token`` searched, ``o`` the mean residual, cached tokens free). Where the
      prompts are cut into more than one step, a step before the last emits no token and costs
      ``step_emit_ms`` less (fitted in both). Both are fitted on the ``quickest`` of each
      prompt's repeats and give residuals for every point.

    Returns the model, the two fits and ``o`` (None where there was no fit to read it from).
    """
    base, per_seq, per_context = fallback.step_base_ms, fallback.decode_ms_per_seq, fallback.decode_ms_per_context_token
    decode_fit = None
    try:
        base, per_seq, fitted, decode_fit = _decode_fit(decode)
        if fitted is None:
            notes.append("decode: no long contexts measured; decode_ms_per_context_token is the default")
        else:
            per_context = fitted
    except ValueError:
        notes.append(
            "decode: fewer than two batch sizes measured; step_base_ms, decode_ms_per_seq and "
            "decode_ms_per_context_token are the defaults"
        )
    base, per_seq, per_context = max(base, 0.0), max(per_seq, 0.0), max(per_context, 0.0)
    per_token, per_cached = fallback.prefill_ms_per_token, fallback.prefill_ms_per_cached_token
    prefill_fit, overhead, overlap, emit = None, None, False, 0.0
    try:
        overhead, emit, per_token, per_cached, prefill_fit = _prefill_fit(prefill, base + per_seq, tail_breaks)
        o_over, e_over, b_over, fit_over = _overlap_fit(prefill, base + per_seq, tail_breaks, per_token)
        if _typical(fit_over) < OVERLAP_BETTER * _typical(prefill_fit):
            notes.append(
                f"prefill: a step's fixed cost overlaps its prompt compute (median residual {_typical(fit_over):.1f} ms "
                f"against {_typical(prefill_fit):.1f} ms for their sum): the twin runs with step_overlap"
            )
            overhead, emit, per_token, per_cached, prefill_fit, overlap = o_over, e_over, b_over, 0.0, fit_over, True
    except ValueError as exc:
        notes.append(f"prefill: {exc}; prefill_ms_per_token and prefill_ms_per_cached_token are the defaults")
    model = StepModel(
        step_base_ms=base, prefill_ms_per_token=max(per_token, 0.0),
        prefill_ms_per_cached_token=max(per_cached, 0.0), decode_ms_per_seq=per_seq,
        decode_ms_per_context_token=per_context, step_emit_ms=emit, step_overlap=overlap,
    )  # fmt: skip
    return model, prefill_fit, decode_fit, overhead


#: the overlap model is kept when its median absolute residual is under this share of the sum's
OVERLAP_BETTER = 0.5


def _typical(fit: Fit) -> float:
    """A fit's median absolute residual (a busy machine's few slow points move it little)."""
    return float(statistics.median(abs(r) for r in fit.residuals_ms)) if fit.residuals_ms else 0.0


def quickest(points: list[PrefillPoint]) -> list[PrefillPoint]:
    """Of the points measured with one prompt length and one cached count, the quickest: noise
    (a late wake-up, another process on the core) only adds time, so the least TTFT of a
    prompt's repeats is the nearest to the engine's own (as decode keeps its quickest round)."""
    best: dict[tuple[int, int], PrefillPoint] = {}
    for point in points:
        key = (point.prompt_tokens, point.cached_tokens)
        if key not in best or point.ttft_ms < best[key].ttft_ms:
            best[key] = point
    return list(best.values())


def prompt_chunks(uncached: int, tail_breaks: tuple[int, ...] = ()) -> list[int]:
    """The chunks a lone prompt of ``uncached`` new tokens is computed in (one step each): one,
    or cut where ``tail_breaks`` tokens are left (``scheduler.SchedulerPolicy.prefill_tail_breaks``)."""
    chunks: list[int] = []
    left = max(uncached, 1)
    while left > 0:
        chunk = left
        for tail in tail_breaks:
            if chunk > tail:
                chunk -= tail
                break
        chunks.append(chunk)
        left -= chunk
    return chunks


#: contexts count as spread (a context term can be fitted) when the longest is at least this
#: many tokens and twice the shortest
CONTEXT_SPREAD_TOKENS = 256


def _decode_fit(points: list[DecodePoint]) -> tuple[float, float, float | None, Fit]:
    """Least squares ``itl = a + c × B + d × B × x``: (a, c, d, residuals). With contexts not
    spread (``CONTEXT_SPREAD_TOKENS``), d is None and the line is fitted on the shortest
    context's points alone (a long-context point would lift it)."""
    import numpy as np

    shortest = min(p.context_tokens for p in points)
    spread = max(p.context_tokens for p in points) >= max(2 * shortest, CONTEXT_SPREAD_TOKENS)
    if not spread:
        points = [p for p in points if p.context_tokens < max(2 * shortest, CONTEXT_SPREAD_TOKENS)]
    batch = np.array([p.batch for p in points], dtype=float)
    context = np.array([p.batch * p.context_tokens for p in points], dtype=float)
    itl = np.array([p.itl_ms for p in points], dtype=float)
    if np.unique(batch).size < 2:
        raise ValueError("fewer than two batch sizes")
    design = np.column_stack([np.ones_like(itl), batch] + ([context] if spread else []))
    solution, *_ = np.linalg.lstsq(design, itl, rcond=None)
    residuals = itl - design @ solution
    names = ["step_base_ms", "decode_ms_per_seq"] + (["decode_ms_per_context_token"] if spread else [])
    fit = Fit(
        residuals_ms=[round(float(r), 4) for r in residuals], rms_ms=float(np.sqrt(np.mean(residuals**2))),
        standard_errors=standard_errors(design, residuals, names),
    )  # fmt: skip
    return float(solution[0]), float(solution[1]), float(solution[2]) if spread else None, fit


def _prefill_fit(
    points: list[PrefillPoint], step_ms: float, tail_breaks: tuple[int, ...]
) -> tuple[float, float, float, float, Fit]:
    """Least squares ``ttft - steps × step_ms = o - e × (steps - 1) + b × uncached + b_c ×
    cached`` (a step before the last emits no token: ``e`` less) over the ``quickest`` of each
    prompt's repeats: (o, e, b, b_c, the residuals of every point)."""
    import numpy as np

    def design(of: list[PrefillPoint]) -> tuple[list[np.ndarray], np.ndarray]:
        uncached = np.array([p.prompt_tokens - p.cached_tokens for p in of], dtype=float)
        cached = np.array([p.cached_tokens for p in of], dtype=float)
        steps = np.array([len(prompt_chunks(int(u), tail_breaks)) for u in uncached], dtype=float)
        ttft = np.array([p.ttft_ms for p in of], dtype=float) - steps * step_ms
        return [np.ones_like(ttft), uncached, cached, 1.0 - steps], ttft

    fitted_on = quickest(points)
    every, ttft = design(fitted_on)
    if np.unique(every[1]).size < 2:
        raise ValueError("fewer than two prompt lengths measured")
    with_cached, with_emit = np.unique(every[2]).size > 1, np.unique(every[3]).size > 1
    kept = [0, 1] + ([2] if with_cached else []) + ([3] if with_emit else [])
    columns = [every[i] for i in kept]
    solution, *_ = np.linalg.lstsq(np.column_stack(columns), ttft, rcond=None)
    if solution[0] < 0:  # the client's own time is not negative: the line through o = 0
        columns[0] = np.zeros_like(ttft)
        solution, *_ = np.linalg.lstsq(np.column_stack(columns), ttft, rcond=None)
    all_columns, all_ttft = design(points)
    if not columns[0].any():
        all_columns[0] = np.zeros_like(all_ttft)
    residuals = all_ttft - np.column_stack([all_columns[i] for i in kept]) @ solution
    k, b = float(solution[0]) if columns[0].any() else 0.0, float(solution[1])
    b_c = float(solution[2]) if with_cached else 0.0
    e = float(min(max(solution[-1], 0.0), step_ms)) if with_emit else 0.0
    names = ["client_overhead_ms", "prefill_ms_per_token", "prefill_ms_per_cached_token", "step_emit_ms"]
    fitted = [names[i] for i in kept]
    design_used = np.column_stack(columns)
    if not columns[0].any():  # through o = 0: the intercept was not fitted
        fitted, design_used = fitted[1:], design_used[:, 1:]
    fit = Fit(
        residuals_ms=[round(float(r), 4) for r in residuals], rms_ms=float(np.sqrt(np.mean(residuals**2))),
        standard_errors=standard_errors(design_used, ttft - design_used @ solution[-design_used.shape[1]:], fitted),
    )  # fmt: skip
    return k, e, b, b_c, fit


def _overlap_fit(
    points: list[PrefillPoint], step_ms: float, tail_breaks: tuple[int, ...], per_token_sum: float
) -> tuple[float, float, float, Fit]:
    """``ttft = o + Σ max(step_ms - e × [not the last chunk], b × chunk)`` over each point's
    chunks: ``e`` and ``b`` searched on a grid (``b`` up to twice ``per_token_sum``), ``o`` the
    mean residual, over the ``quickest`` of each prompt's repeats: (o, e, b, the residuals of
    every point)."""
    import numpy as np

    def ttft_of(of: list[PrefillPoint]) -> np.ndarray:
        return np.array([p.ttft_ms for p in of], dtype=float)

    def chunks_of(of: list[PrefillPoint]) -> list[list[int]]:
        return [prompt_chunks(p.prompt_tokens - p.cached_tokens, tail_breaks) for p in of]

    def predicted(chunks: list[list[int]], e: float, b: float) -> np.ndarray:
        return np.array(
            [sum(max(step_ms - (e if i < len(cs) - 1 else 0.0), b * c) for i, c in enumerate(cs)) for cs in chunks]
        )

    fitted_on = quickest(points)
    ttft, chunks = ttft_of(fitted_on), chunks_of(fitted_on)
    emits = not all(len(cs) == 1 for cs in chunks)
    top = max(2 * per_token_sum, 1e-6)
    best: tuple[float, float, float] | None = None
    for e in np.linspace(0, step_ms, 21) if emits else [0.0]:
        for b in np.linspace(0, top, 201):
            rms = float(np.std(ttft - predicted(chunks, float(e), float(b))))
            if best is None or rms < best[0]:
                best = (rms, float(e), float(b))
    assert best is not None
    _, e, b = best
    o = float(np.mean(ttft - predicted(chunks, e, b)))
    residuals = ttft_of(points) - predicted(chunks_of(points), e, b) - o
    return o, e, b, Fit(residuals_ms=[round(float(r), 4) for r in residuals], rms_ms=float(np.sqrt(np.mean(residuals**2))))


def load_calibration(path: str | os.PathLike[str], engine: str | None = None) -> Calibration:
    """The calibration in ``path``; an ``InputError`` naming the file and the field when it is not
    YAML, not a calibration, of another version, malformed, or of another engine than ``engine``."""
    import yaml
    from pydantic import ValidationError

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{path}: not YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"{path}: format: {found!r}; a calibration file says format: {FORMAT}")
    if data.get("version") != VERSION:
        raise InputError(f"{path}: version: {data.get('version')!r}; this swarm reads version {VERSION}")
    try:
        calibration = Calibration.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{path}: {'.'.join(str(p) for p in e['loc']) or '(top level)'}: "
            + ("unknown key" if e["type"] == "extra_forbidden" else e["msg"])
            for e in exc.errors()
        ]
        raise InputError("\n".join(problems)) from None
    if engine is not None and calibration.engine != engine:
        raise InputError(f"{path}: engine: {calibration.engine}, not {engine} (the engine asked for)")
    return calibration


def record_held_against(path: str | os.PathLike[str], held: HeldAgainst) -> Calibration:
    """Write ``held`` into the calibration file at ``path`` (in place of any earlier one),
    keeping the rest of the file; returns the calibration written."""
    import yaml

    calibration = load_calibration(path).model_copy(update={"held_against": held})
    text = yaml.safe_dump(calibration.model_dump(mode="json"), sort_keys=False)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    return calibration
