"""The step model: how long a step of the engine lasts, and decode stretches planned at once.

Place in the map (docs/architecture.md, "The emulator"): the timing half of the engine model's step
loop (``engine_model.EngineModel``), which decides what each step runs (its scheduler) and
sleeps for as long as ``step_ms`` says it lasts:

    step_ms = a + b * prefill_tokens + b_c * cached_tokens_admitted + h * host_loaded
              + c * sequences + d * context_of_decoding_sequences

(with ``step_overlap`` the larger of the fixed part, a + c + d, and the compute part, b + b_c + h;
a step that emits no token costs ``step_emit_ms`` less; the constants are ``EmulatorConfig``'s).

**Decode stretches** (a virtual clock only: ``swarm simulate``). While every running request
decodes, none is admitted, none finishes and the KV holds each one's next token, each step is like
the last: the same batch, one more token of context each. ``Scheduler.decode_stretch`` says how
many such steps lie ahead (with a queue, ``Scheduler.queue_held``: how many of them admit nothing
from it); ``plan_stretch`` gives each one's length and end by the same arithmetic as a step planned
alone, and the loop sleeps once, to the last end, instead of once a step. Its readers wait for
their request's end (``Generation.times``), so nobody sees a token late. An arrival, or a request
whose reader went, wakes it (unless the queue stays one no step of it admits from:
``EngineModel.reader_went``): the one under way ends as a step alone would (a request cancelled in
it emits nothing), its requests taking the tokens of the steps before it then (what reads them
sooner counts them from the stretch: ``EngineModel.stretch_ended``), and the loop plans again
from its end, as it would have stepping one step at a time.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from swarm.emulator.config import EmulatorConfig

G = TypeVar("G")


def step_ms(
    cfg: EmulatorConfig,
    *,
    emits: bool,
    batch: int,
    context: int,
    prefill: int = 0,
    cached: int = 0,
    host: int = 0,
) -> float:
    """A step's modelled length in milliseconds (the module docstring): ``batch`` sequences,
    ``context`` tokens of those decoding, ``prefill`` uncached prompt tokens computed, ``cached``
    tokens of those admitted, ``host`` tokens loaded from the host tier."""
    fixed = (
        cfg.step_base_ms
        - (0.0 if emits else min(cfg.step_emit_ms, cfg.step_base_ms))
        + cfg.decode_ms_per_seq * batch
        + (cfg.decode_ms_per_context_token * context if cfg.decode_ms_per_context_token else 0.0)
    )
    compute = cfg.prefill_ms_per_token * prefill + cfg.prefill_ms_per_cached_token * cached + cfg.host_load_ms_per_token * host
    return max(fixed, compute) if cfg.step_overlap else fixed + compute


@dataclass
class DecodeStretch(Generic[G]):
    """Decode steps of ``decoding`` planned as one: step ``i`` lasts ``lengths_s[i]`` and ends at
    ``ends_s[i]`` (the loop's timeline) and ``model_ends_s[i]`` (the model's clock). The first
    ``applied`` have emitted their tokens. The ends are an ``array('d')``: a slice of them goes
    onto each reader's ``Generation.times`` as one copy of bytes."""

    decoding: list[G]
    ends_s: array[float] = field(default_factory=lambda: array("d"))
    model_ends_s: list[float] = field(default_factory=list)
    lengths_s: list[float] = field(default_factory=list)
    applied: int = 0


def plan_stretch(
    cfg: EmulatorConfig, decoding: list[G], context: int, steps: int, anchor_s: float, model_clock_s: float
) -> DecodeStretch[G]:
    """``steps`` decode steps of ``decoding`` (``context`` tokens in all now) from the step loop's
    ``anchor_s`` and the model's clock: each step's length as ``step_ms`` gives it alone, its end
    the loop's ``anchor + length`` chain, as stepping one at a time makes it."""
    stretch: DecodeStretch[G] = DecodeStretch(decoding)
    batch = len(decoding)
    end, model = anchor_s, model_clock_s
    for i in range(steps):
        ms = step_ms(cfg, emits=True, batch=batch, context=context + i * batch)
        length = ms / 1000.0
        model += length
        end += length
        stretch.ends_s.append(end)
        stretch.model_ends_s.append(model)
        stretch.lengths_s.append(length)
    return stretch
