"""Emptying a target's prefix cache between sweep points and between a run's repeats, where the
engine has a way.

Place in the map (docs/architecture.md, "Runtime"): every sweep point, and every repeat of a
run (``--repeat``), sends the same seeded traffic, so without a reset an engine would reuse the
previous one's prompts and its hit rate would count work it never did. The way per engine is its module's ``cache_reset``
(``swarm/engines/``: SGLang ``POST /flush_cache``, vLLM ``POST /reset_prefix_cache``, llama.cpp
``POST /slots/<id>?action=erase`` for each slot ``GET /slots`` lists); swarm's emulator accepts
``POST /swarm/flush_cache`` in every profile. A fleet's replicas are each emptied the same way
(its router is not asked). TensorRT-LLM's server has none: the point records
``none``, and the report warns that reuse from an earlier point may count there (as it does
for a reset that failed).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request

from swarm.clients.client import read_api_key, redact_url
from swarm.engines import emulated
from swarm.engines.engine import CacheReset
from swarm.engines.registry import get_engine
from swarm.runtime.context import ResolvedTarget

log = logging.getLogger(__name__)


def _call(url: str, method: str, key: str | None, timeout_s: float) -> bytes:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(
        url, method=method, headers=headers, data=b"" if method == "POST" else None
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as resp:
        return bytes(resp.read())


class ResetRefused(ValueError):
    """The engine answered but did not empty its cache (vLLM: ``{"success": false}``)."""


def _refused(body: bytes) -> bool:
    """Whether a 200 answer says the reset did not happen: vLLM answers ``{"success": false}``
    while blocks are still held by requests."""
    try:
        answer = json.loads(body or b"null")
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("success") is False


def _flush(url: str, key: str | None, timeout_s: float, retry_s: float) -> None:
    """POST ``url``; while the engine refuses because requests are still running (SGLang and the
    emulator answer 400 then, vLLM 200 with ``{"success": false}``; the previous point's cut
    requests may still be finishing), try again every 0.5 s for up to ``retry_s``."""
    deadline = time.monotonic() + retry_s
    while True:
        try:
            if not _refused(_call(url, "POST", key, timeout_s)):
                return
            if time.monotonic() >= deadline:
                raise ResetRefused(f"{url} answered success: false until the retries ran out")
        except urllib.error.HTTPError as exc:
            if exc.code not in (400, 503) or time.monotonic() >= deadline:
                raise
        time.sleep(0.5)


def _erase_slots(base: str, reset: CacheReset, key: str | None, timeout_s: float) -> str:
    """Erase every slot the server lists (llama.cpp); what was done."""
    assert reset.slots_path is not None
    slots = json.loads(_call(base + reset.slots_path, "GET", key, timeout_s))
    ids = [int(s["id"]) for s in slots if isinstance(s, dict) and "id" in s]
    for slot in ids:
        _call(base + reset.path.format(id=slot), reset.method, key, timeout_s)
    return f"{reset.method} {reset.path.replace('{id}', '<id>')} ({len(ids)} slots)"


def reset_prefix_cache(target: ResolvedTarget, timeout_s: float = 30.0, retry_s: float = 15.0) -> str:
    """Empty ``target``'s prefix cache (a fleet's: every replica's, not the router's); returns
    what was done (``"POST /swarm/flush_cache"``), or ``"none"`` when the engine has no way, or
    ``"failed: ..."`` (logged as a warning; the report lists the point)."""
    key = read_api_key(target.api_key_env, target.api_key_file)
    reset = emulated.CACHE_RESET if target.emulated else get_engine(target.engine).cache_reset
    if reset is None:
        return "none"
    done, failed = [], []
    for base in [u.rstrip("/") for u in target.replicas] or [target.url.rstrip("/")]:
        try:
            if reset.per_slot:
                done.append(_erase_slots(base, reset, key, timeout_s))
            else:
                _flush(base + reset.path, key, timeout_s, retry_s)
                done.append(f"POST {reset.path}")
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
            hint = ""
            if isinstance(exc, urllib.error.HTTPError) and exc.code in reset.failure_hints:
                hint = f" ({reset.failure_hints[exc.code]})"
            log.warning(
                "could not empty the prefix cache of %s at %s: %s%s", target.name, redact_url(base), exc, hint
            )
            failed.append(f"{redact_url(base)}: {type(exc).__name__}: {exc}{hint}" if target.replicas else f"{type(exc).__name__}: {exc}{hint}")
    if failed:
        return "failed: " + "; ".join(failed)
    return done[0] if len(done) == 1 else f"{done[0]} on each of {len(done)} replicas"
