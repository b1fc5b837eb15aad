"""The emulator's HTTP server: SGLang's, TensorRT-LLM's or vLLM's API over the engine model.

Place in the map (docs/architecture.md, "The emulator"): a separate program (``swarm emulate``) that
serves chat and completions (every profile), SGLang's native ``/generate`` (sglang profile),
``/v1/models``, ``/health``, ``/swarm/flush_cache`` (every profile; ``/flush_cache`` for sglang,
``/reset_prefix_cache`` for vllm), ``/get_server_info`` / ``/server_info`` (sglang) or
``/version`` (trtllm, vllm), and Prometheus metrics. Every response carries a
``Server: swarm-emulator`` header and the info endpoints say ``"emulator": true``, so
figures from it are never mistaken for an engine's.

Which endpoints, and every other difference between the profiles, come from the engine's
``behaviour`` object. A generating handler parses the request, draws its fault (``injection``)
and submits it to the engine model; ``responses`` builds the answer in its format, and the
drawn ``RequestFault`` acts at the points where it strikes.

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
from array import array
from typing import Any

from aiohttp import web

from swarm import __version__
from swarm.emulator.behaviour import COMMON_ROUTES, EngineBehaviour, engine_behaviour
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.engine_model import EngineModel
from swarm.emulator.faults import FaultInjector
from swarm.emulator.formats import error_body, prometheus_text, trtllm_iteration_stats
from swarm.emulator.generation import Generation, PromptTooLong
from swarm.emulator.injection import NATIVE_FAULTS, FaultySite, RequestFault, fault_for
from swarm.emulator.responses import (
    CHAT,
    COMPLETION,
    OpenAIFormat,
    generate_answer,
    generate_stream,
    json_response,
    stream_answer,
    whole_answer,
)
from swarm.emulator.slot_cache import SlotCache
from swarm.emulator.tokens import PromptTokenizer
from swarm.engines.emulated import REPLICA_HEADER
from swarm.errors import InputError
from swarm.jsoncodec import loads
from swarm.token_ids import TokenIds

log = logging.getLogger(__name__)

_MODEL_KEY = web.AppKey("engine_model", EngineModel)
_CONFIG_KEY = web.AppKey("emulator_config", EmulatorConfig)
_HANDLERS_KEY = web.AppKey("handlers", object)
_FAULTS_KEY = web.AppKey("faults", object)


def _bad(message: str, status: int = 400) -> web.Response:
    kind = "BadRequestError" if status == 400 else "NotFoundError"
    return json_response(error_body(message, status, kind), status)


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class _Handlers:
    """The endpoints. A generating handler parses and checks the request, draws its fault and
    submits it; ``responses`` writes the answer (formats and templates), and the drawn
    ``RequestFault`` acts where it strikes."""

    def __init__(self, config: EmulatorConfig, model: EngineModel, faults: FaultInjector | None) -> None:
        self.config = config
        self.model = model
        self.tokens = PromptTokenizer(config.tokenizer)
        self.behaviour: EngineBehaviour = model.behaviour
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

    @staticmethod
    def _check_fields(body: dict[str, Any], allowed: frozenset[str] | None) -> web.Response | None:
        """A 400 naming the fields outside ``allowed`` (None: every field is accepted)."""
        if allowed is None:
            return None
        unknown = sorted(set(body) - allowed)
        if unknown:
            return _bad(f"1 validation error: extra fields not permitted: {', '.join(unknown)}")
        return None

    def _submit(self, prompt: TokenIds, max_tokens: Any) -> Generation | web.Response:
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
        refused = self._check_fields(body, self.behaviour.chat_fields)
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
        gen = self._submit(self.tokens.parts(parts), max_tokens)
        if isinstance(gen, web.Response):
            return gen
        return await self._openai(request, body, gen, CHAT, fault)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        refused = self._check_fields(body, self.behaviour.completion_fields)
        if refused:
            return refused
        fault, replaced = await fault_for(self.faults, request, body)
        if replaced is not None:
            return replaced
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return _bad("prompt must be a string")
        gen = self._submit(self.tokens.text(prompt), body.get("max_tokens"))
        if isinstance(gen, web.Response):
            return gen
        return await self._openai(request, body, gen, COMPLETION, fault)

    async def _openai(
        self,
        request: web.Request,
        body: dict[str, Any],
        gen: Generation,
        fmt: OpenAIFormat,
        fault: RequestFault | None,
    ) -> web.StreamResponse:
        rid = fmt.id_prefix + secrets.token_hex(12)
        created_s = int(time.time())
        if not body.get("stream"):
            return await whole_answer(self.config, gen, fmt, rid, created_s, fault)
        options = body.get("stream_options") or {}
        include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
        return await stream_answer(
            request, self.config, gen, fmt, rid, created_s, include_usage=include_usage, fault=fault
        )

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
        gen = self._submit(self.tokens.text(text), params.get("max_new_tokens"))
        if isinstance(gen, web.Response):
            return gen
        rid = secrets.token_hex(16)
        start_s = time.monotonic()
        if not body.get("stream"):
            return await generate_answer(gen, rid, start_s)
        return await generate_stream(request, gen, rid, start_s)

    # -- management ----------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text=self.behaviour.health_text)

    async def models(self, request: web.Request) -> web.Response:
        return json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.config.model,
                        "object": "model",
                        "created": 0,
                        "owned_by": self.behaviour.owned_by,
                        "root": self.config.model,
                        "max_model_len": self.config.max_prompt_tokens,
                    }
                ],
            }
        )

    def _info(self) -> dict[str, Any]:
        cfg = self.config
        policy = self.model.scheduler.policy
        return {
            "version": f"swarm-emulator {__version__}",
            "emulator": True,
            "engine_profile": cfg.engine,
            "model_path": cfg.model,
            "served_model_name": cfg.model,
            "enable_cache_report": self.behaviour.cache_report(cfg),
            "page_size": self.behaviour.page_tokens(cfg),
            "max_total_num_tokens": cfg.kv_capacity_tokens,
            "schedule_policy": policy.queue,
            "chunked_prefill_size": policy.step_token_budget if policy.chunked_prefill else -1,
            "max_running_requests": policy.max_running,
            "cache_capacity_tokens": cfg.cache_capacity_tokens,
            "timing": cfg.timing,
            "step_base_ms": cfg.step_base_ms,
            "prefill_ms_per_token": cfg.prefill_ms_per_token,
            "prefill_ms_per_cached_token": cfg.prefill_ms_per_cached_token,
            "decode_ms_per_seq": cfg.decode_ms_per_seq,
            "decode_ms_per_context_token": cfg.decode_ms_per_context_token,
            "first_token_ms": cfg.first_token_ms,
            "token_ms": cfg.token_ms,
        }

    async def server_info(self, request: web.Request) -> web.Response:
        return json_response(self._info())

    async def load(self, request: web.Request) -> web.Response:
        """SGLang's ``/get_load``: per data-parallel rank (one here) its requests, those waiting,
        and its KV tokens in use, which SGLang's router sums as a worker's load
        (``--policy power_of_two``; read as sglang-router 0.3.2 reads it)."""
        model = self.model
        return json_response(
            [{"dp_rank": 0, "num_reqs": len(model.running) + len(model.waiting), "num_waiting_reqs": len(model.waiting),
              "num_tokens": model.kv_used}]
        )  # fmt: skip

    async def model_info(self, request: web.Request) -> web.Response:
        return json_response({"model_path": self.config.model, "is_generation": True, "emulator": True})

    async def version(self, request: web.Request) -> web.Response:
        return json_response(
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
            return json_response({"requests": None, "connections": None, "injected": {}, "spec": None})
        return json_response(self.faults.snapshot(by_request=request.query.get("by_request") == "1"))

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.model.flush_cache():
            return web.Response(
                text="Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n"
            )
        return web.Response(status=400, text="Cache not flushed: requests are in flight.\n")

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        """vLLM's development endpoint: always 200, ``{"success": false}`` while requests hold
        blocks (the caller may retry)."""
        return json_response({"success": self.model.flush_cache()})

    async def props(self, request: web.Request) -> web.Response:
        """llama.cpp's ``/props``: its slots, a slot's context, the model (and that it is swarm's emulator)."""
        cache = self.model.cache
        slots = len(cache.slots) if isinstance(cache, SlotCache) else 1
        ctx = (
            getattr(self.behaviour, "slot_context", lambda _c: None)(self.config)
            or self.config.max_prompt_tokens
        )
        return json_response(
            {
                "default_generation_settings": {"n_ctx": ctx, "params": {}},
                "total_slots": slots,
                "model_alias": self.config.model,
                "model_path": self.config.model,
                "build_info": f"swarm-emulator {__version__}",
                "emulator": True,
                "endpoint_slots": True,
                "endpoint_metrics": True,
            }
        )

    async def slots(self, request: web.Request) -> web.Response:
        """llama.cpp's ``GET /slots``: each slot's id, context and whether a request holds it."""
        cache = self.model.cache
        if not isinstance(cache, SlotCache):
            return _bad("no slots", 404)
        ctx = (
            getattr(self.behaviour, "slot_context", lambda _c: None)(self.config)
            or self.config.max_prompt_tokens
        )
        return json_response(
            [
                {"id": s.index, "n_ctx": ctx, "speculative": False, "is_processing": s.busy,
                 "n_prompt_tokens": len(s.tokens)}
                for s in cache.slots
            ]
        )  # fmt: skip

    async def slot_action(self, request: web.Request) -> web.Response:
        """llama.cpp's ``POST /slots/<id>?action=erase``: empty an idle slot (the save and restore
        actions are not emulated)."""
        cache = self.model.cache
        action = request.query.get("action")
        try:
            index = int(request.match_info["id_slot"])
        except ValueError:
            return _bad("invalid slot id")
        if not isinstance(cache, SlotCache) or not 0 <= index < len(cache.slots):
            return _bad(f"invalid slot id {index}")
        if action != "erase":
            return _bad(f"action {action!r} is not emulated (erase is)", 501)
        slot = cache.slots[index]
        if slot.busy:
            return _bad("slot is processing a task", 400)
        erased = len(slot.tokens)
        slot.tokens, slot.checkpoints = array("q"), []
        return json_response({"id_slot": index, "n_erased": erased})

    async def iteration_stats(self, request: web.Request) -> web.Response:
        """TensorRT-LLM's JSON ``/metrics``."""
        return json_response(trtllm_iteration_stats(self.config, self.model))

    async def perf_metrics(self, request: web.Request) -> web.Response:
        """TensorRT-LLM's ``/perf_metrics``: each request finished since the last read."""
        return json_response(self.model.drain_perf_metrics())

    async def prometheus(self, request: web.Request) -> web.Response:
        """Prometheus text with the engine's metric names (SGLang's ``/metrics``, TensorRT-LLM's
        ``/prometheus/metrics``)."""
        return web.Response(
            text=prometheus_text(self.config, self.model), content_type="text/plain", charset="utf-8"
        )


class _Identity:
    """What every response says of its server: ``Server``, and ``X-Swarm-Replica`` (its
    ``--replica-name``, else its URL once bound), so a client behind a router can tell which
    replica answered."""

    def __init__(self, name: str | None) -> None:
        self.server = f"swarm-emulator/{__version__}"
        self.replica = name or ""

    async def label(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Server"] = self.server
        if self.replica:
            response.headers[REPLICA_HEADER] = self.replica


_IDENTITY_KEY = web.AppKey("identity", _Identity)


class _QuietPreface(logging.Filter):
    """Drops aiohttp's traceback for an HTTP/2 preface (``PRI * HTTP/2.0``): SGLang's router
    tries one on every worker it adds before it talks HTTP/1.1, and the emulator answers 400."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (exc is not None and "PRI/Upgrade" in str(exc))


logging.getLogger("aiohttp.server").addFilter(_QuietPreface())


def build_app(config: EmulatorConfig, faults: FaultInjector | None = None) -> web.Application:
    """The aiohttp application of one emulated engine (the engine model starts with the app).

    ``faults`` overrides the injector built from ``config.faults`` (a test keeps a handle)."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[_CONFIG_KEY] = config
    identity = app[_IDENTITY_KEY] = _Identity(config.replica_name)
    app.on_response_prepare.append(identity.label)
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

    for r in (*COMMON_ROUTES, *engine_behaviour(config).routes):
        if r.method == "GET":
            app.router.add_get(r.path, route(r.handler))
        else:
            app.router.add_route(r.method, r.path, route(r.handler))
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
        site = FaultySite(runner, config.host, config.listen_port, faults)
    else:
        site = web.TCPSite(runner, config.host, config.listen_port, backlog=4096)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        if exc.errno == errno.EADDRINUSE:
            raise InputError(f"port {config.listen_port} on {config.host} is already in use") from None
        raise InputError(
            f"cannot listen on {config.host}:{config.listen_port}: {exc.strerror or exc}"
        ) from None
    port = config.listen_port
    for address in runner.addresses:  # the bound (host, port), also when port 0 was asked
        port = int(address[1])
        break
    identity = app[_IDENTITY_KEY]
    identity.replica = identity.replica or f"http://{config.host}:{port}"
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


def serve_until_stopped(config: EmulatorConfig, ready: Any = None, exit_with_parent: bool = False) -> None:
    """Serve ``config`` in this process until SIGINT or SIGTERM, or, with ``exit_with_parent``,
    until the process that started this one is gone (a killed parent cannot stop us itself):
    ``swarm emulate``, and each replica of ``--replicas N``. An ``InputError`` (the port taken)
    is raised."""
    import os
    import signal

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        parent = os.getppid()

        async def watch_parent() -> None:
            while os.getppid() == parent:
                await asyncio.sleep(0.5)
            task.cancel()

        watcher = loop.create_task(watch_parent()) if exit_with_parent else None
        try:
            await serve_forever(config, ready)
        except asyncio.CancelledError:
            pass
        finally:
            if watcher is not None:
                watcher.cancel()

    asyncio.run(main())
