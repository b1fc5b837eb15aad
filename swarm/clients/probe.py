"""``swarm probe URL``: which engine is there, which model, and whether it reports cached tokens.

Place in the map (docs/architecture.md, "Clients"): a user-facing check that sits on the EngineClient. It asks only
documented endpoints, then sends two short requests that share a long prefix and reads the
cached tokens of the second. When something needed for a fair measurement is missing (cached
tokens not reported, no metrics endpoint), it says what to change on the server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import secrets
import socket
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from swarm.clients.aiohttp_transport import open_http_session
from swarm.clients.client import HttpEngineClient, normalise_base_url, read_api_key, redact_url
from swarm.engines.engine import Engine, Served
from swarm.engines.registry import ENGINES, FALLBACK_ENGINE, engine_by_owner, get_engine
from swarm.errors import InputError
from swarm.jsoncodec import loads
from swarm.record import RequestRecord
from swarm.request import ChatMessage, EngineRequest

log = logging.getLogger(__name__)

#: Words in the shared prefix of the two cache-test requests: random 3-7 letter words are about
#: 2.8 tokens each for a real tokenizer, so ~500 tokens, many blocks of any engine's block size,
#: yet within a small context (llama-server gives each slot ``-c / --parallel`` tokens: 1,024 for
#: ``-c 8192 --parallel 8``; 640 words, 1,819 tokens, did not fit).
PROBE_PREFIX_WORDS = 180


@dataclass
class ProbeResult:
    url: str
    engine: str | None
    emulator: bool = False
    model: str | None = None
    server_version: str | None = None
    endpoints: dict[str, int] = field(default_factory=dict)
    metrics_path: str | None = None
    #: the KV block size the server states (vLLM's ``vllm:cache_config_info``): cached tokens
    #: come in multiples of it
    block_tokens: int | None = None
    #: the KV pool in tokens where the server states it (vLLM's ``kv_cache_size_tokens``)
    kv_tokens: int | None = None
    #: the KV pool in blocks where the server states it (vLLM's ``num_gpu_blocks``)
    kv_blocks: int | None = None
    #: where the server says its model lives (``/v1/models``' ``root``: vLLM's model folder)
    model_root: str | None = None
    cache_reported: bool | None = None
    first_cached_tokens: int | None = None
    second_cached_tokens: int | None = None
    second_prompt_tokens: int | None = None
    #: time to first token of the first (cold) and the second (shared-prefix) test request
    first_ttft_ms: float | None = None
    second_ttft_ms: float | None = None
    request_errors: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


#: A probe GET that meets a reset or closed connection is tried this many times in all (a GET
#: is idempotent, and a probe measures nothing: a flaky server should not fail a run's start).
PROBE_GET_TRIES = 3


async def _get(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> tuple[int, bytes, str]:
    for attempt in range(1, PROBE_GET_TRIES + 1):
        try:
            async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                return resp.status, await resp.content.read(1 << 20), resp.headers.get("Server", "")
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            if attempt == PROBE_GET_TRIES or isinstance(exc, aiohttp.ClientConnectorError):
                raise
            log.debug("probe %s: %s; trying again", url, exc)
    raise AssertionError("unreachable")


def _json_or_none(body: bytes) -> Any:
    try:
        return loads(body)
    except ValueError:
        return None


def _identify(
    found: dict[str, tuple[int, bytes, str]], owned_by: str | None
) -> tuple[str | None, bool, str | None]:
    """(engine, is_emulator, version) from what the endpoints answered: each engine's own
    signs (``Engine.identify``, in the registry's order), else ``owned_by``, else a server
    that answers ``/version`` is taken for the registry's fallback engine."""
    served = Served({path: (status, body) for path, (status, body, _) in found.items()})
    for candidate in ENGINES.values():
        hit = candidate.identify(served)
        if hit is not None:
            return candidate.name, hit.emulated, hit.version
    by_owner = engine_by_owner(owned_by)
    if by_owner is not None:
        return by_owner, False, served.version()
    if (version := served.version()) is not None:
        return FALLBACK_ENGINE, False, version
    return None, False, None


#: every path some engine's ``identify`` or info reads, and the metrics paths
PROBE_PATHS: tuple[str, ...] = tuple(
    dict.fromkeys(
        p
        for e in ENGINES.values()
        for p in (e.health_path, "/v1/models", *e.info_paths, "/version", e.metrics_path)
        if p
    )
)


def _prefix_text() -> str:
    """Fresh random words, so no earlier request can have cached them."""
    rng = secrets.SystemRandom()
    letters = "abcdefghijklmnopqrstuvwxyz"
    return " ".join(
        "".join(rng.choice(letters) for _ in range(rng.randint(3, 7))) for _ in range(PROBE_PREFIX_WORDS)
    )


def unreachable(url: str, exc: BaseException) -> str:
    """One line on why ``url`` could not be reached, in words (not aiohttp's internals)."""
    cause: BaseException | None = getattr(exc, "os_error", None) or exc
    if isinstance(cause, ConnectionRefusedError):
        return f"connection refused at {url} (is the server running, and on this port?)"
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(cause, socket.gaierror):
        return f"cannot resolve the host of {url}"
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return f"no answer from {url} within 5 s"
    if isinstance(cause, OSError) and cause.strerror:
        return f"cannot reach {url}: {cause.strerror.lower()}"
    return f"cannot reach {url}: {type(exc).__name__}: {exc}"


async def probe(
    url: str,
    *,
    engine: str | None = None,
    model: str | None = None,
    api_key_env: str | None = None,
    api_key_file: str | None = None,
    send_requests: bool = True,
) -> ProbeResult:
    """Identify the server at ``url`` and test its cache reporting. Raises InputError if unreachable."""
    base = normalise_base_url(url)
    if engine is not None:
        get_engine(engine)
    key = read_api_key(api_key_env, api_key_file)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    result = ProbeResult(url=redact_url(base), engine=None)
    async with open_http_session(max_connections=16, connect_timeout_s=5.0) as session:
        found: dict[str, tuple[int, bytes, str]] = {}
        try:
            first = await _get(session, base + "/v1/models", headers)
        except (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError) as exc:
            raise InputError(unreachable(result.url, exc)) from None
        found["/v1/models"] = first
        for path in PROBE_PATHS:
            if path in found:
                continue
            try:
                found[path] = await _get(session, base + path, headers)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                log.debug("probe %s%s: %s", base, path, exc)
        result.endpoints = {p: hit[0] for p, hit in found.items()}
        models = _json_or_none(first[1]) if first[0] == 200 else None
        owned_by = None
        if isinstance(models, dict) and models.get("data"):
            entry = models["data"][0]
            result.model = str(entry.get("id"))
            owned_by = entry.get("owned_by")
            root = entry.get("root")
            result.model_root = root if isinstance(root, str) and root else None
        detected, emulated, version = _identify(found, owned_by)
        result.engine = engine or detected
        result.emulator = emulated or "swarm-emulator" in first[2]
        result.server_version = version
        profile: Engine = get_engine(result.engine or FALLBACK_ENGINE)
        if result.engine is None:
            result.advice.append(
                "engine not recognised; pass --engine to choose a profile (requests use plain OpenAI fields)"
            )
        metrics = found.get(profile.metrics_path or "")
        if profile.metrics_path and metrics and metrics[0] == 200:
            result.metrics_path = profile.metrics_path
            result.block_tokens = _stated_block_size(metrics[1])
            result.kv_tokens = _stated_kv_tokens(metrics[1])
            result.kv_blocks = _stated_kv_blocks(metrics[1])
        elif result.engine:
            result.advice.append(
                f"no Prometheus metrics at {profile.metrics_path}: {profile.cache_report_hint}"
            )
        if send_requests:
            await _cache_test(session, base, profile, model or result.model or "default", key, result)
    return result


_BLOCK_SIZE = re.compile(rb'^vllm:cache_config_info\{[^}]*\bblock_size="(\d+)"', re.MULTILINE)


_KV_TOKENS = re.compile(rb'^vllm:cache_config_info\{[^}]*\bkv_cache_size_tokens="(\d+)"', re.MULTILINE)


def _stated_kv_tokens(metrics_text: bytes) -> int | None:
    """The KV pool in tokens in a vLLM server's ``vllm:cache_config_info`` gauge, if it has one."""
    hit = _KV_TOKENS.search(metrics_text)
    return int(hit.group(1)) if hit else None


_KV_BLOCKS = re.compile(rb'^vllm:cache_config_info\{[^}]*\bnum_gpu_blocks="(\d+)"', re.MULTILINE)


def _stated_kv_blocks(metrics_text: bytes) -> int | None:
    """The KV pool in blocks in a vLLM server's ``vllm:cache_config_info`` gauge, if it has one."""
    hit = _KV_BLOCKS.search(metrics_text)
    return int(hit.group(1)) if hit else None


def _stated_block_size(metrics_text: bytes) -> int | None:
    """The block size in a vLLM server's ``vllm:cache_config_info`` gauge, if it has one."""
    hit = _BLOCK_SIZE.search(metrics_text)
    return int(hit.group(1)) if hit else None


async def _cache_test(
    session: aiohttp.ClientSession,
    base: str,
    profile: Engine,
    model: str,
    api_key: str | None,
    result: ProbeResult,
) -> None:
    # Read usage as reported: absent cached tokens must show as absent here, even for SGLang.
    literal = dataclasses.replace(profile, cached_absent_means_zero=False)
    client = HttpEngineClient(session, base, literal, model=model, api_key=api_key, target="probe")
    prefix = _prefix_text()
    records: list[RequestRecord] = []
    for question in ("first", "second"):
        request = EngineRequest(
            messages=(ChatMessage("system", prefix), ChatMessage("user", f"{question} question")),
            max_tokens=4,
        )
        record = await client.send(request)
        records.append(record)
        if not record.ok:
            result.request_errors.append(f"{record.status.value}: {record.error}")
            result.advice.append(
                "the test requests failed (see request_errors): check the model name (--model), the API "
                "key, and that the server's context per request holds about 600 tokens"
            )
            return
    first, second = records
    result.first_cached_tokens = first.cached_tokens
    result.second_cached_tokens = second.cached_tokens
    result.second_prompt_tokens = second.prompt_tokens
    result.first_ttft_ms = first.ttft_ns / 1e6 if first.ttft_ns is not None else None
    result.second_ttft_ms = second.ttft_ns / 1e6 if second.ttft_ns is not None else None
    if second.cached_tokens is None:
        result.cache_reported = False
        result.advice.append(f"cached tokens are not reported: {profile.cache_report_hint}")
    elif second.cached_tokens == 0:
        result.cache_reported = True
        result.advice.append(
            "the second request shared a long prefix but reported 0 cached tokens: prefix caching "
            f"may be off, or cache reporting disabled ({profile.cache_report_hint})"
        )
    else:
        result.cache_reported = True
