"""The emulator's HTTP server: SGLang's or TensorRT-LLM's API over the engine model.

Place in the map (docs/architecture.md, "The emulator"): a separate program (``swarm emulate``) that
serves chat and completions (both profiles), SGLang's native ``/generate`` (sglang profile),
``/v1/models``, ``/health``, ``/flush_cache``, ``/get_server_info`` / ``/server_info``
(sglang) or ``/version`` (trtllm), and Prometheus metrics. Every response carries a
``Server: swarm-emulator`` header and the info endpoints say ``"emulator": true``, so
figures from it are never mistaken for an engine's.

``start_emulator`` runs it inside the current event loop; ``EmulatorThread`` runs it on a
background thread with its own loop (for synchronous callers such as ``swarm run``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import secrets
import threading
import time
from contextlib import aclosing
from typing import Any

from aiohttp import web

from swarm import __version__
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.engine_model import EngineModel, Generation, PromptTooLong
from swarm.emulator.faults import FaultInjector
from swarm.emulator.formats import (
    TRTLLM_CHAT_FIELDS,
    TRTLLM_COMPLETION_FIELDS,
    error_body,
    generate_meta,
    owned_by,
    prometheus_text,
    trtllm_iteration_stats,
    usage,
)
from swarm.emulator.injection import (
    NATIVE_FAULTS,
    FaultySite,
    abort_connection,
    fault_for,
    mid_stream_fault,
)
from swarm.emulator.tokens import tokenize, tokenize_parts
from swarm.engines.dialects import dumps, loads
from swarm.errors import InputError

log = logging.getLogger(__name__)

_MODEL_KEY = web.AppKey("engine_model", EngineModel)
_CONFIG_KEY = web.AppKey("emulator_config", EmulatorConfig)
_HANDLERS_KEY = web.AppKey("handlers", object)
_FAULTS_KEY = web.AppKey("faults", object)
_DONE = b"data: [DONE]\n\n"


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(obj), status=status, content_type="application/json")


def _bad(message: str, status: int = 400) -> web.Response:
    kind = "BadRequestError" if status == 400 else "NotFoundError"
    return _json(error_body(message, status, kind), status)


def _sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class _Handlers:
    def __init__(self, config: EmulatorConfig, model: EngineModel, faults: FaultInjector | None) -> None:
        self.config = config
        self.model = model
        self.faults = faults

    # -- helpers -------------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> dict[str, Any] | web.Response:
        try:
            body = loads(await request.read())
        except ValueError:
            return _bad("request body is not valid JSON")
        if not isinstance(body, dict):
            return _bad("request body must be a JSON object")
        return body

    def _check_fields(self, body: dict[str, Any], allowed: frozenset[str]) -> web.Response | None:
        if self.config.engine != "trtllm":
            return None
        unknown = sorted(set(body) - allowed)
        if unknown:
            return _bad(f"1 validation error: extra fields not permitted: {', '.join(unknown)}")
        return None

    def _submit(self, prompt: list[str], max_tokens: Any) -> Generation | web.Response:
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            return _bad(f"max_tokens must be a positive integer, got {max_tokens!r}")
        try:
            return self.model.submit(prompt, max_tokens)
        except PromptTooLong as exc:
            return _bad(str(exc))

    # -- OpenAI endpoints ----------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        refused = self._check_fields(body, TRTLLM_CHAT_FIELDS)
        if refused:
            return refused
        fault, replaced = await fault_for(self.faults, request, body)
        if replaced is not None:
            return replaced
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _bad("messages must be a non-empty list")
        parts = [_message_text(m.get("content")) for m in messages if isinstance(m, dict)]
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        gen = self._submit(tokenize_parts(parts), max_tokens)
        if isinstance(gen, web.Response):
            return gen
        return await self._openai(request, body, gen, chat=True, fault=fault)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        refused = self._check_fields(body, TRTLLM_COMPLETION_FIELDS)
        if refused:
            return refused
        fault, replaced = await fault_for(self.faults, request, body)
        if replaced is not None:
            return replaced
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return _bad("prompt must be a string")
        gen = self._submit(tokenize(prompt), body.get("max_tokens"))
        if isinstance(gen, web.Response):
            return gen
        return await self._openai(request, body, gen, chat=False, fault=fault)

    async def _openai(
        self,
        request: web.Request,
        body: dict[str, Any],
        gen: Generation,
        *,
        chat: bool,
        fault: str | None = None,
    ) -> web.StreamResponse:
        cfg = self.config
        spec = self.faults.spec if self.faults is not None else None
        rid = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"
        if not body.get("stream"):
            async with aclosing(gen.tokens()) as stream:
                async for _ in stream:
                    pass
            if spec is not None and fault == "stall_first":
                await asyncio.sleep(spec.stall_s)
            if fault == "cut":
                abort_connection(request)
                raise asyncio.CancelledError  # nothing more to send on a dead connection
            text = " ".join(gen.output)
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "logprobs": None}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            return _json(
                {
                    "id": rid,
                    "object": obj,
                    "created": created,
                    "model": cfg.model,
                    "choices": [choice],
                    "usage": usage(cfg, gen),
                }
            )
        options = body.get("stream_options") or {}
        include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        chunk_obj = obj + ".chunk" if chat else obj
        head = {"id": rid, "object": chunk_obj, "created": created, "model": cfg.model}
        if chat:
            await resp.write(
                _sse(
                    {
                        **head,
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": ""},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                        ],
                    }
                )
            )
        # one event per token, built from byte templates; tokens that came out together
        # (a lagging reader) are sent in one write
        prefix = b"data: " + dumps(head)[:-1] + b',"choices":[{"index":0,'
        prefix += b'"delta":{"content":' if chat else b'"text":'
        suffix = (b"}," if chat else b",") + b'"logprobs":null,"finish_reason":null}]}\n\n'
        stamp = cfg.stamp_chunks
        first = True
        sent = 0
        half = max(1, gen.max_new // 2)
        if spec is not None and fault == "stall_first":
            await asyncio.sleep(spec.stall_s)
        async with aclosing(gen.tokens()) as stream:
            async for words in stream:
                if stamp:  # the send time of this write, on every event of it
                    suffix = (b"}," if chat else b",") + (
                        b'"logprobs":null,"finish_reason":null}],"swarm_sent_ns":%d}\n\n'
                        % time.perf_counter_ns()
                    )
                events = []
                for word in words:
                    events.append(prefix + dumps(word if first else " " + word) + suffix)
                    first = False
                before, sent = sent, sent + len(words)
                if spec is not None and fault is not None and before < half <= sent:
                    # the fault comes after exactly half the tokens, however they were batched
                    await resp.write(b"".join(events[: half - before]))
                    await mid_stream_fault(request, resp, fault, spec, prefix)
                    events = events[half - before :]
                if events:
                    await resp.write(b"".join(events))
        if fault == "no_done":
            await resp.write_eof()
            return resp
        final: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length"}
        if chat:
            final["delta"] = {}
        else:
            final["text"] = ""
        await resp.write(_sse({**head, "choices": [final]}))
        if include_usage:
            await resp.write(_sse({**head, "choices": [], "usage": usage(cfg, gen)}))
        await resp.write(_DONE)
        await resp.write_eof()
        return resp

    # -- SGLang native -------------------------------------------------------------------------

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        text = body.get("text")
        if not isinstance(text, str):
            return _bad("text must be a string (batched /generate is not emulated)")
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            return _bad("sampling_params must be an object")
        # the native API gets the error statuses and slow headers; the stream faults are
        # injected on the OpenAI endpoints only
        _, replaced = await fault_for(self.faults, request, body, kinds=NATIVE_FAULTS)
        if replaced is not None:
            return replaced
        gen = self._submit(tokenize(text), params.get("max_new_tokens"))
        if isinstance(gen, web.Response):
            return gen
        rid = secrets.token_hex(16)
        start = time.monotonic()
        if not body.get("stream"):
            async with aclosing(gen.tokens()) as stream:
                async for _ in stream:
                    pass
            return _json(
                {
                    "text": " ".join(gen.output),
                    "meta_info": generate_meta(gen, rid, True, time.monotonic() - start),
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        async with aclosing(gen.tokens()) as stream:
            async for _ in stream:
                done = gen.finished
                await resp.write(
                    _sse(
                        {
                            "text": " ".join(gen.output),
                            "meta_info": generate_meta(gen, rid, done, time.monotonic() - start),
                        }
                    )
                )
        await resp.write(_DONE)
        await resp.write_eof()
        return resp

    # -- management ----------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="OK" if self.config.engine == "sglang" else "")

    async def models(self, request: web.Request) -> web.Response:
        return _json(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.config.model,
                        "object": "model",
                        "created": 0,
                        "owned_by": owned_by(self.config),
                        "root": self.config.model,
                        "max_model_len": self.config.max_prompt_tokens,
                    }
                ],
            }
        )

    def _info(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "version": f"swarm-emulator {__version__}",
            "emulator": True,
            "engine_profile": cfg.engine,
            "model_path": cfg.model,
            "served_model_name": cfg.model,
            "enable_cache_report": cfg.cache_report if cfg.engine == "sglang" else True,
            "page_size": 1 if cfg.engine == "sglang" else cfg.block_tokens,
            "max_total_num_tokens": cfg.kv_capacity_tokens,
            "cache_capacity_tokens": cfg.cache_capacity_tokens,
            "timing": cfg.timing,
            "step_base_ms": cfg.step_base_ms,
            "prefill_ms_per_token": cfg.prefill_ms_per_token,
            "decode_ms_per_seq": cfg.decode_ms_per_seq,
            "first_token_ms": cfg.first_token_ms,
            "token_ms": cfg.token_ms,
        }

    async def server_info(self, request: web.Request) -> web.Response:
        return _json(self._info())

    async def model_info(self, request: web.Request) -> web.Response:
        return _json({"model_path": self.config.model, "is_generation": True, "emulator": True})

    async def version(self, request: web.Request) -> web.Response:
        return _json(
            {
                "version": f"swarm-emulator {__version__}",
                "emulator": True,
                "engine_profile": self.config.engine,
            }
        )

    async def fault_counts(self, request: web.Request) -> web.Response:
        """``GET /swarm/faults``: requests seen and faults injected so far, by kind (and, with
        ``?by_request=1``, by request id)."""
        if self.faults is None:
            return _json({"requests": None, "connections": None, "injected": {}, "spec": None})
        return _json(self.faults.snapshot(by_request=request.query.get("by_request") == "1"))

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.model.flush_cache():
            return web.Response(
                text="Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n"
            )
        return web.Response(status=400, text="Cache not flushed: requests are in flight.\n")

    async def metrics(self, request: web.Request) -> web.Response:
        if self.config.engine == "trtllm":
            return _json(trtllm_iteration_stats(self.config, self.model))
        return web.Response(
            text=prometheus_text(self.config, self.model), content_type="text/plain", charset="utf-8"
        )

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(
            text=prometheus_text(self.config, self.model), content_type="text/plain", charset="utf-8"
        )


@web.middleware
async def _label(request: web.Request, handler: Any) -> web.StreamResponse:
    response: web.StreamResponse = await handler(request)
    if not response.prepared:
        response.headers["Server"] = f"swarm-emulator/{__version__}"
    return response


def build_app(config: EmulatorConfig, faults: FaultInjector | None = None) -> web.Application:
    """The aiohttp application of one emulated engine (the engine model starts with the app).

    ``faults`` overrides the injector built from ``config.faults`` (a test keeps a handle)."""
    app = web.Application(middlewares=[_label], client_max_size=64 * 1024 * 1024)
    app[_CONFIG_KEY] = config
    app[_FAULTS_KEY] = (
        faults
        if faults is not None
        else (FaultInjector(config.faults) if config.faults is not None and config.faults.active else None)
    )

    async def on_startup(app: web.Application) -> None:
        model = EngineModel(config)
        model.start()
        app[_MODEL_KEY] = model
        h = _Handlers(config, model, app[_FAULTS_KEY])  # type: ignore[arg-type]
        app[_HANDLERS_KEY] = h

    async def on_cleanup(app: web.Application) -> None:
        await app[_MODEL_KEY].stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)

    def route(name: str) -> Any:
        async def call(request: web.Request) -> web.StreamResponse:
            try:
                response: web.StreamResponse = await getattr(request.app[_HANDLERS_KEY], name)(request)
            except ConnectionError:
                # the client went away mid-response (it timed out, or a fault cut it): end the
                # handler as aiohttp does on a disconnect, without logging a traceback per request
                raise asyncio.CancelledError from None
            return response

        return call

    r = app.router
    r.add_post("/v1/chat/completions", route("chat"))
    r.add_post("/v1/completions", route("completions"))
    r.add_get("/v1/models", route("models"))
    r.add_get("/health", route("health"))
    r.add_get("/swarm/faults", route("fault_counts"))
    if config.engine == "sglang":
        r.add_post("/generate", route("generate"))
        r.add_get("/health_generate", route("health"))
        r.add_route("*", "/flush_cache", route("flush_cache"))
        r.add_get("/get_server_info", route("server_info"))
        r.add_get("/server_info", route("server_info"))
        r.add_get("/get_model_info", route("model_info"))
        r.add_get("/metrics", route("metrics"))
    else:
        r.add_get("/version", route("version"))
        r.add_get("/metrics", route("metrics"))
        r.add_get("/prometheus/metrics", route("prometheus"))
    return app


class RunningEmulator:
    """An emulator serving in the current event loop. ``await close()`` stops it."""

    def __init__(
        self, runner: web.AppRunner, config: EmulatorConfig, port: int, faults: FaultInjector | None = None
    ) -> None:
        self._runner = runner
        self.config = config
        self.port = port
        self.url = f"http://{config.host}:{port}"
        #: the fault injector (its counts), when faults are configured
        self.faults = faults

    async def close(self) -> None:
        await self._runner.cleanup()


async def start_emulator(config: EmulatorConfig) -> RunningEmulator:
    """Start serving; raises InputError when the port is taken or the address is unusable."""
    # a client that disconnects cancels its handler (engines abort such requests); stopping
    # waits at most a second for handlers still running
    app = build_app(config)
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        handler_cancellation=True,
        shutdown_timeout=1.0,
    )
    await runner.setup()
    faults = app[_FAULTS_KEY]
    site: web.TCPSite
    if isinstance(faults, FaultInjector) and faults.spec.refuse > 0:
        site = FaultySite(runner, config.host, config.port, faults)
    else:
        site = web.TCPSite(runner, config.host, config.port, backlog=4096)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        if exc.errno == errno.EADDRINUSE:
            raise InputError(f"port {config.port} on {config.host} is already in use") from None
        raise InputError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    port = config.port
    for address in runner.addresses:  # the bound (host, port), also when port 0 was asked
        port = int(address[1])
        break
    return RunningEmulator(runner, config, port, faults if isinstance(faults, FaultInjector) else None)


class EmulatorThread:
    """Runs an emulator on a background thread with its own event loop.

    Use as a context manager: ``with EmulatorThread(config) as emu: emu.url``.
    """

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"emulator-{config.engine}", daemon=True
        )
        self._server: RunningEmulator | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "emulator not started"
        return self._server.url

    @property
    def port(self) -> int:
        assert self._server is not None, "emulator not started"
        return self._server.port

    def start(self) -> EmulatorThread:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(start_emulator(self.config), self._loop)
        try:
            self._server = fut.result(timeout=30)
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            raise
        return self

    def stop(self) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.close(), self._loop).result(timeout=30)
            self._server = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> EmulatorThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def serve_forever(config: EmulatorConfig, ready: Any = None) -> None:
    """Serve until cancelled (``swarm emulate``). ``ready(url)`` is called once listening."""
    server = await start_emulator(config)
    if ready is not None:
        ready(server)
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()
