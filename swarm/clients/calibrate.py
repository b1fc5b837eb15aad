"""``swarm calibrate``: measure a server's step model and write an engine twin's calibration file.

Place in the map (docs/architecture.md, "Clients"): a short probe through swarm's own client
(``HttpEngineClient``), then the fit of ``engines.calibration``. Four phases, each bounded by
what is left of the time budget:

1. **stated**: what the server says of itself (``clients.probe``: its engine, model, block
   size; vLLM's KV pool; SGLang's server info: KV tokens, chunked prefill size, schedule
   policy, running cap; llama.cpp's slots); for vLLM, the model's attention layout read from
   its ``config.json`` (``--model-config``, or the folder ``/v1/models`` names when the server
   is on this machine): with it, the pool is the stated blocks (``_pool_from_layout``) and the
   capacity phase is not needed;
2. **prefill**: requests one at a time, cold prompts of ``prompt_words`` words (a fresh
   nonce first, so nothing is cached) ``repeats`` times each, then each prompt again (served
   from the cache): prompt and cached tokens as the server reports them, and the TTFT;
3. **decode**: ``batches`` of streams sent at once, ``decode_tokens`` tokens each (EOS
   ignored): per stream its mean gap between tokens once all decode (the first ``SKIP_GAPS``
   and the last gap left out: admission and the stragglers' end; a mean, as a late step the
   engine makes up in the next would split a median), and the median of those over streams;
   ``decode_rounds`` times for each batch size, keeping the quickest (noise only adds time);
   then ``context_batch`` streams with long prompts (``context_words``), for the cost of context;
   no batch larger than the slots a server states (llama.cpp);
4. **capacity** (twins with a pool of tokens, whose server states at most
   ``capacity_max_tokens`` or nothing): how many fresh prompts the prefix cache holds
   (``_Probe.run_capacity``); the room found becomes the twin's cache. Where it runs, it has
   ``CAPACITY_SHARE`` of the budget to itself: prefill and decode stop at the rest.

A request that fails ends the probe: the file keeps what was measured, ``complete: false``, and
a note naming the phase and the error. The fit fills what the points cannot give with the
emulator's defaults, and says so.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import json
import logging
import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from swarm.clients.aiohttp_transport import open_http_session
from swarm.clients.client import HttpEngineClient, normalise_base_url, open_transport, redact_url
from swarm.clients.probe import ProbeResult, probe
from swarm.engines import emulated
from swarm.engines.calibration import (
    Calibration,
    CapacityProbe,
    DecodePoint,
    PrefillPoint,
    StepModel,
    fit_step_model,
)
from swarm.engines.registry import get_engine
from swarm.engines.sglang import STATED_POLICIES
from swarm.errors import InputError
from swarm.record import RequestRecord
from swarm.request import ChatMessage, EngineRequest, Timeouts

log = logging.getLogger(__name__)

#: words that most tokenizers keep as one token each
WORDS = (
    "the quick brown fox jumps over a lazy dog while seven wise owls watch from an old oak tree "
    "near the river bank and count every star in the night sky"
).split()
#: gaps left out at the start of each stream in the decode phase (admission of the batch)
SKIP_GAPS = 3


@dataclass(frozen=True)
class ProbePlan:
    """What the probe sends; the defaults fit in about a minute on a real engine."""

    prompt_words: tuple[int, ...] = (16, 128, 256, 512, 768)
    repeats: int = 3
    batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    #: the decode phase again at ``context_batch`` streams with prompts this long (words): the
    #: cost of context
    context_words: tuple[int, ...] = (512, 1024)
    context_batch: int = 4
    decode_tokens: int = 40
    #: each batch size is sent this many times, and the quickest kept
    decode_rounds: int = 2
    #: the capacity phase's prompts (words), and the most tokens it fills before it gives up
    capacity_words: int = 448
    capacity_max_tokens: int = 32_768
    budget_s: float = 300.0
    #: the served model's ``config.json`` (vLLM: its attention layout), where not found beside
    #: the server
    model_config: Path | None = None


class ProbeEnded(Exception):
    """A request failed, or the time budget ran out: the probe stops with what it has."""


class BudgetSpent(ProbeEnded):
    """The time budget (or a phase's share of it) ran out."""


#: of the time budget, the share kept for the capacity phase where there is one: prefill and
#: decode stop at the rest, so the room the twin's cache gets is measured (a slow engine, vLLM's
#: CPU build at about 150 ms a step, spent a 240 s budget in prefill and decode alone)
CAPACITY_SHARE = 0.4


def _prompt(words: int, nonce: str) -> tuple[ChatMessage, ...]:
    body = " ".join(WORDS[i % len(WORDS)] for i in range(words))
    return (ChatMessage("user", f"probe {nonce} {body}"),)


class _Probe:
    def __init__(self, client: HttpEngineClient, plan: ProbePlan, say: Callable[[str], None]) -> None:
        self.client = client
        self.plan = plan
        self.say = say
        self.deadline = time.monotonic() + plan.budget_s
        self.prefill: list[PrefillPoint] = []
        self.decode: list[DecodePoint] = []
        #: the server reported no cached tokens for a send it served from its cache
        self.unreported = False
        #: the capacity phase: prompts held and lost (``CapacityProbe``), None where not run; the
        #: number of prompts it tries first (half the stated pool's worth, where one is stated)
        self.capacity: CapacityProbe | None = None
        self.capacity_start = 2
        self._cached_when_held = 0
        #: requests the server runs at once, where it states it (llama.cpp's slots): the decode
        #: phase sends no larger batches (the rest would wait, not decode)
        self.slots: int | None = None

    async def send(self, messages: tuple[ChatMessage, ...], max_tokens: int) -> RequestRecord:
        if time.monotonic() > self.deadline:
            raise BudgetSpent(f"the time budget of {self.plan.budget_s:g} s ran out")
        record = await self.client.send(EngineRequest(messages=messages, max_tokens=max_tokens, ignore_eos=True))
        if not record.ok or record.ttft_ns is None:
            raise ProbeEnded(f"a request failed ({record.status.value}: {record.error or record.http_status})")
        return record

    async def run_prefill(self) -> None:
        self.say(f"prefill: {len(self.plan.prompt_words)} prompt lengths x {self.plan.repeats}, cold then cached")
        for words in self.plan.prompt_words:
            for _ in range(self.plan.repeats):
                messages = _prompt(words, secrets.token_hex(4))
                for again in range(2):  # cold, then the same prompt from the cache
                    record = await self.send(messages, 1)
                    if again and record.cached_tokens is None:
                        self.unreported = True  # a cached send's TTFT without its count: not a point
                        continue
                    self.prefill.append(
                        PrefillPoint(
                            prompt_tokens=record.prompt_tokens or 0, cached_tokens=record.cached_tokens or 0,
                            ttft_ms=(record.ttft_ns or 0) / 1e6,
                        )
                    )  # fmt: skip

    async def run_decode(self) -> None:
        self.say(
            f"decode: batches of {', '.join(map(str, self.plan.batches))} streams of {self.plan.decode_tokens} tokens, "
            f"then {self.plan.context_batch} with prompts of {', '.join(map(str, self.plan.context_words))} words"
        )
        slots = self.slots or max(self.plan.batches)
        batches = [b for b in self.plan.batches if b <= slots] or [1]
        context_batch = min(self.plan.context_batch, slots)
        shapes = [(b, 8) for b in batches] + [(context_batch, w) for w in self.plan.context_words]
        for batch, words in shapes:
            rounds = [await self._decode_round(batch, words) for _ in range(self.plan.decode_rounds)]
            measured = [r for r in rounds if r is not None]
            if measured:  # the quickest round: a busy machine only ever adds time
                self.decode.append(min(measured, key=lambda p: p.itl_ms))

    async def run_capacity(self) -> None:
        """How many fresh prompts of ``capacity_words`` the prefix cache holds: ``n`` sent one by
        one, then the first again; held when it comes back mostly cached. ``n`` doubles from
        ``capacity_start`` until one is lost (or ``capacity_max_tokens`` is passed), then halves the gap; each try
        with prompts of its own (least recently used first out: the first goes when they pass the
        room)."""
        words = self.plan.capacity_words
        self.say(f"capacity: fresh prompts of {words} words until the first is no longer cached")
        held, lost, n, prompt_tokens = 0, None, self.capacity_start, 0
        self._cached_when_held = 0
        while lost is None:
            kept, prompt_tokens = await self._held(n, words)
            if not kept:
                lost = n
            elif n * prompt_tokens > self.plan.capacity_max_tokens:
                held = n
                break
            else:
                held, n = n, n * 2
        while lost is not None and lost - held > 1:
            mid = (held + lost) // 2
            kept, prompt_tokens = await self._held(mid, words)
            held, lost = (mid, lost) if kept else (held, mid)
        self.capacity = CapacityProbe(
            prompt_tokens=prompt_tokens, held=held, lost=lost, cached_tokens=self._cached_when_held
        )

    async def _held(self, n: int, words: int) -> tuple[bool, int]:
        nonces = [secrets.token_hex(4) for _ in range(n)]
        for nonce in nonces:
            await self.send(_prompt(words, nonce), 1)
        again = await self.send(_prompt(words, nonces[0]), 1)
        prompt, cached = again.prompt_tokens or 0, again.cached_tokens or 0
        if 2 * cached > prompt:
            self._cached_when_held = max(self._cached_when_held, cached)
            return True, prompt
        return False, prompt

    async def _decode_round(self, batch: int, words: int) -> DecodePoint | None:
        tokens = self.plan.decode_tokens
        records = await asyncio.gather(
            *(self.send(_prompt(words, secrets.token_hex(4)), tokens) for _ in range(batch))
        )
        if words > 8 and any(r.prompt_tokens is None for r in records):
            return None  # a long context the server does not count is no point of the context line
        means, gaps, contexts = [], 0, []
        for r in records:
            steady = r.chunk_ns[SKIP_GAPS:-1]  # after admission, before the last token
            if len(steady) >= 2:
                means.append((steady[-1] - steady[0]) / (len(steady) - 1) / 1e6)
                gaps += len(steady) - 1
                contexts.append((r.prompt_tokens or 0) + tokens // 2)
        if not means:
            return None
        context = round(sum(contexts) / len(contexts))
        return DecodePoint(batch=batch, context_tokens=context, itl_ms=statistics.median(means), gaps=gaps)


async def calibrate(
    url: str,
    *,
    engine: str | None = None,
    model: str | None = None,
    api_key_env: str | None = None,
    plan: ProbePlan | None = None,
    fallback: StepModel,
    on_progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Probe the server at ``url`` and fit its step model (see the module docstring);
    ``fallback``: the values of what the points cannot give (the emulator's defaults)."""
    plan = plan or ProbePlan()
    say = on_progress or (lambda text: None)
    found = await probe(url, engine=engine, model=model, api_key_env=api_key_env, send_requests=False)
    if found.engine is None:
        raise InputError(f"{redact_url(url)}: cannot tell which engine serves it; name it with --engine")
    stated, notes = await _stated(url, found)
    layout_known = _pool_from_layout(found, plan.model_config, stated, notes)
    say(f"{found.engine} at {found.url}: stated {stated or 'nothing'}")
    base = normalise_base_url(url)
    async with open_transport(base) as transport:
        client = HttpEngineClient(
            transport, base, get_engine(found.engine), model=model or found.model or "default",
            api_key_env=api_key_env, timeouts=Timeouts(first_token_s=60.0, total_s=120.0, idle_s=30.0),
        )  # fmt: skip
        run = _Probe(client, plan, say)
        slots = stated.get("parallel")
        run.slots = slots if isinstance(slots, int) and slots > 0 else None
        phases = [run.run_prefill, run.run_decode]
        pool = stated.get("kv_capacity_tokens")
        measure_room = not layout_known and not (isinstance(pool, int) and pool > plan.capacity_max_tokens)
        if found.engine in emulated.POOL_TWINS and measure_room:
            run.capacity_start = max(2, pool // (2 * (plan.capacity_words + 32))) if isinstance(pool, int) else 2
            phases.append(run.run_capacity)
        complete = await _run_phases(run, phases, notes, say)
    if run.unreported:
        notes.append(
            "the server reports no cached tokens (SGLang: --enable-cache-report; vLLM: "
            "--enable-prompt-tokens-details): the repeated prompts are left out, and "
            "prefill_ms_per_cached_token is the default"
        )
    tail_breaks = _swa_tail(found, run, stated, notes)
    if found.engine not in emulated.TWINS:
        notes.append(f"the emulator has no {found.engine} twin yet: swarm emulate cannot serve this file")
    return _calibration(found, stated, run, complete, notes, fallback, tail_breaks)


async def _run_phases(
    run: _Probe, phases: list[Callable[[], Any]], notes: list[str], say: Callable[[str], None]
) -> bool:
    """The probe's phases in order; whether all ran to their end. With a capacity phase, the
    others stop at ``1 - CAPACITY_SHARE`` of the budget (a note says so) and it gets the rest;
    a failed request ends the probe (the file keeps what was measured)."""
    end = run.deadline
    capacity = run.run_capacity in phases
    if capacity:
        run.deadline = end - CAPACITY_SHARE * run.plan.budget_s
    complete = True
    for phase in phases:
        name = phase.__name__.removeprefix("run_")
        if phase == run.run_capacity:
            run.deadline = end
        elif capacity and time.monotonic() > run.deadline:  # its share spent: on to the capacity phase
            complete = False
            notes.append(
                f"{name} not run: the phases before it spent their share of the time budget "
                f"({1 - CAPACITY_SHARE:.0%} of {run.plan.budget_s:g} s, the rest kept for the capacity phase)"
            )
            say(notes[-1])
            continue
        try:
            await phase()
        except ProbeEnded as exc:
            complete = False
            points = f"{len(run.prefill)} prefill and {len(run.decode)} decode points measured"
            if isinstance(exc, BudgetSpent) and capacity and phase != run.run_capacity:
                notes.append(
                    f"{name} stopped at its share of the time budget ({1 - CAPACITY_SHARE:.0%} of "
                    f"{run.plan.budget_s:g} s, the rest kept for the capacity phase): {points}"
                )
                say(notes[-1])
                continue
            notes.append(f"the probe ended early in {name} ({exc}): {points}")
            say(notes[-1])
            break
    return complete


def _swa_tail(found: ProbeResult, run: _Probe, stated: dict[str, object], notes: list[str]) -> tuple[int, ...]:
    """An engine whose repeated short prompts say it serves a sliding-window model (llama.cpp's
    checkpoints, ``engines.emulated.WINDOW_FROM_REPEATS``): the twin takes the window
    (``swa_tokens``) and the fit cuts each prompt's tail into the steps the engine runs it in."""
    read = emulated.WINDOW_FROM_REPEATS.get(found.engine or "")
    repeats = [(p.prompt_tokens, p.cached_tokens) for p in run.prefill if 2 * p.cached_tokens > p.prompt_tokens]
    seen = read(repeats) if read is not None else None
    if seen is None:
        return ()
    window, tails = seen
    stated["swa_tokens"] = window
    recomputed = repeats[0][0] - repeats[0][1]
    notes.append(
        f"a repeated prompt reuses all but its last {recomputed} tokens: a sliding-window model's context "
        f"checkpoints; the window is not stated, {window} assumed (Gemma 3's; --swa-tokens sets another)"
    )
    return tails


def _apply_capacity(capacity: CapacityProbe | None, stated: dict[str, object], notes: list[str]) -> None:
    """The measured room for prompts becomes the twin's prefix cache (and its KV, where the server
    states a pool: the cache and running requests share it), over what the server states (a
    hybrid model's pool in tokens is not what prompts of a given size see); a capacity past the
    probe's reach leaves the stated one."""
    if capacity is None:
        return
    if capacity.lost is None:
        notes.append(
            f"capacity: {capacity.held} prompts of {capacity.prompt_tokens} tokens stayed cached; more was not tried"
        )
        return
    measured = capacity.tokens
    pool = stated.get("kv_capacity_tokens")
    stated["cache_capacity_tokens"] = measured
    if isinstance(pool, int):
        stated["kv_capacity_tokens"] = measured
    notes.append(
        f"capacity: the first of {capacity.held} prompts of {capacity.prompt_tokens} tokens stayed cached "
        f"({capacity.cached_tokens} of its tokens), of {capacity.lost} it did not: the twin's cache holds "
        f"{measured} tokens"
        + (f" (the server states {pool}: prompts of this size see another room)" if isinstance(pool, int) else "")
    )


def _calibration(
    found: ProbeResult,
    stated: dict[str, object],
    run: _Probe,
    complete: bool,
    notes: list[str],
    fallback: StepModel,
    tail_breaks: tuple[int, ...] = (),
) -> Calibration:
    model, prefill_fit, decode_fit, overhead = fit_step_model(run.prefill, run.decode, fallback, notes, tail_breaks)
    _apply_capacity(run.capacity, stated, notes)
    assert found.engine is not None
    return Calibration(
        engine=found.engine, url=found.url, model=found.model,
        measured_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), complete=complete,
        parameters=model, stated=stated, prefill_points=run.prefill, decode_points=run.decode,
        prefill_fit=prefill_fit, decode_fit=decode_fit, client_overhead_ms=overhead, capacity=run.capacity,
        notes=notes,
    )  # fmt: skip


async def _stated(url: str, found: ProbeResult) -> tuple[dict[str, object], list[str]]:
    """What the server states of itself, as emulator settings, and notes on what it does not."""
    stated: dict[str, object] = {}
    notes: list[str] = []
    if found.block_tokens is not None:  # vLLM's cache_config_info
        stated["block_tokens"] = found.block_tokens
    if found.kv_tokens is not None:  # one pool holds running requests and cached blocks: both get it
        stated["kv_capacity_tokens"] = stated["cache_capacity_tokens"] = found.kv_tokens
    paths, fields = emulated.STATED_INFO.get(found.engine or "", ((), {}))
    info = await _server_info(url, found, paths) if paths else {}
    for field, setting in fields.items():
        value = info.get(field)
        if value is None or (setting == "schedule_policy" and value not in STATED_POLICIES):
            continue
        stated[setting] = value
    if "kv_capacity_tokens" not in stated:
        notes.append("the server states no KV capacity: the twin keeps the emulator's (--kv-capacity-tokens)")
    return stated, notes


def is_loopback(url: str) -> bool:
    """The server at ``url`` runs on this machine (a path it names is one here)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _pool_from_layout(
    found: ProbeResult, model_config: Path | None, stated: dict[str, object], notes: list[str]
) -> bool:
    """The pool from the KV blocks the server states and the model's attention layout (vLLM: a
    hybrid model's sliding-window groups, ``engines.emulated.POOL_FROM_LAYOUT``), into
    ``stated``; False (with a note) where either is not known, so the capacity phase measures
    the room."""
    if model_config is not None and not model_config.is_file():
        raise InputError(f"--model-config {model_config}: no such file")
    reader = emulated.POOL_FROM_LAYOUT.get(found.engine or "")
    if reader is None or found.kv_blocks is None or found.block_tokens is None:
        if model_config is not None:
            notes.append(f"--model-config {model_config} was not read: the server states no KV blocks to lay out")
        return False
    path = model_config
    if path is None and found.model_root and is_loopback(found.url):
        path = Path(found.model_root) / "config.json"
    if path is None or not path.is_file():
        notes.append(
            "the model's attention layout is unknown (pass --model-config CONFIG.json): the capacity phase "
            "measures the room prompts see"
        )
        return False
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a model config (JSON): {exc}") from None
    read = reader(found.kv_blocks, found.block_tokens, config) if isinstance(config, dict) else "no JSON object"
    if isinstance(read, str):
        notes.append(f"{path}: {read}; the capacity phase measures the room prompts see")
        return False
    settings, note = read
    stated.update(settings)
    notes.append(f"{path}: {note}")
    return True


async def _server_info(url: str, found: ProbeResult, paths: tuple[str, ...]) -> dict[str, object]:
    base = normalise_base_url(url)
    async with open_http_session(max_connections=2, connect_timeout_s=5.0) as session:
        for path in paths:
            try:
                async with session.get(base + path) as response:
                    if response.status == 200:
                        body = await response.json(content_type=None)
                        if isinstance(body, dict):
                            return body
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as exc:
                log.debug("calibrate: %s%s: %s", found.url, path, exc)
    return {}
