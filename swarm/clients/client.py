"""EngineClient: sends one request, streams the answer, returns a RequestRecord.

Place in the map (docs/architecture.md, "Clients"): the seam between the agent runtime and an engine. One
``HttpEngineClient`` per target, all sharing the process's connections to it, a ``Transport``
(``clients.transport``; ``open_transport``: swarm's own streaming HTTP/1.1 client,
``clients.h1``, for http:// targets; an aiohttp session, ``clients.aiohttp_transport``, for
https://). The transports turn their own exceptions into the exchange's ``ExchangeFailure``;
this client catches only that, cancellation, and a bug of its own. It never raises
for a failed request: connection refused or reset before a response, an HTTP error (with its
``Retry-After``, kept for a retry policy), a stream cut mid-way, invalid JSON, an oversized
line, a stall past the first-token, mid-stream silence or total deadline, or an outside
cancellation each become a record with its own ``status`` and a truncated ``error`` text in
which API keys are redacted. It never retries a failure (that is the agent's policy, off by
default); the one resend it makes is of a request that died on a reused keep-alive connection
before any response, which the server never saw. Each request carries ``RUN_ID/REQUEST_ID`` as
an ``X-Request-Id`` header, so a server's logs (and the emulator's fault log) join the trace.

Timing: ``sent_ns`` is the wall clock when the request is handed to the connection;
latencies are ``perf_counter_ns`` offsets from that same instant. Every SSE event that carries
generated text adds one entry to ``chunk_ns``; events that arrived in the same network read
share its arrival time (they did arrive together).

Cancellation: when the calling task is cancelled from outside, ``send`` returns a record with
status ``cancelled`` instead of raising, so an interrupted run still records what was in
flight; the caller treats that status as the end of its work.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from swarm.clients import deadlines
from swarm.clients.aiohttp_transport import AiohttpTransport, as_transport, open_http_session
from swarm.clients.dialects import PATHS, StreamDecoder, build_body
from swarm.clients.exchange import Call, StreamReading, run_exchange
from swarm.clients.h1 import H1Pool
from swarm.clients.redact import REDACTED, redact, register_secret
from swarm.clients.transport import ExchangeFailure, Transport
from swarm.engines.engine import Engine
from swarm.engines.registry import check_dialect
from swarm.errors import InputError
from swarm.jsoncodec import dumps
from swarm.record import RequestIdentity, RequestRecord, Status, truncate_error
from swarm.request import EngineRequest, Timeouts
from swarm.texts import as_str

log = logging.getLogger(__name__)

_perf_ns = time.perf_counter_ns

#: A request id sent as the ``X-Request-Id`` header: printable ASCII with no spaces (an id of
#: a user's own topology node that is not is kept in the trace but not sent).
_HEADER_SAFE = re.compile(r"[!-~]{1,200}")


class EngineClient(Protocol):
    """Sends requests to one target. ``send`` never raises for a failed request."""

    target: str
    profile: Engine
    dialect: str
    model: str
    #: whether ``send`` reads a request's ``prompt_ids`` (word ids the sender holds) in place
    #: of tokenising its text: a sender gives them only then (a client over HTTP sends text)
    reads_token_ids: bool
    #: whether ``send`` reads a request's ``prompt_runs`` (where its ids are corpus runs): a
    #: sender gives them only then (a simulated fleet behind the cache-aware router)
    reads_prompt_runs: bool

    def encode(self, request: EngineRequest) -> bytes:
        """The request's body, built ahead of its send (``send`` takes it as ``payload``)."""
        ...

    async def send(self, request: EngineRequest, payload: bytes | None = None) -> RequestRecord: ...


#: ``open_transport`` kinds: ``auto`` is swarm's HTTP/1.1 client for http:// and aiohttp for https://
TRANSPORTS = ("auto", "h1", "aiohttp")


@contextlib.asynccontextmanager
async def open_transport(
    url: str, *, kind: str = "auto", connect_timeout_s: float | None = 10.0, receive_clock: str = "watched"
) -> AsyncIterator[Transport]:
    """The connections of a process to one target, for ``HttpEngineClient``: swarm's own
    streaming HTTP/1.1 client (``clients.h1``) for plain http, aiohttp for https. Closed on
    exit. Must be entered inside a running event loop. ``receive_clock`` ``kernel``: every
    read timed by its kernel receive stamp where the transport can (``h1``); ``watched``: and
    each first token by its own arrival, however late the loop reads it; ``user``: by the
    time the client read it."""
    if kind not in TRANSPORTS:
        raise InputError(f"unknown transport {kind!r} (known: {', '.join(TRANSPORTS)})")
    transport: Transport
    if kind == "h1" or (kind == "auto" and urlsplit(url).scheme == "http"):
        transport = H1Pool(
            connect_timeout_s=connect_timeout_s,
            receive_stamps=receive_clock != "user",
            watch_first_token=receive_clock == "watched",
        )
    else:
        transport = AiohttpTransport(open_http_session(connect_timeout_s=connect_timeout_s))
    try:
        yield transport
    finally:
        await transport.close()


def normalise_base_url(url: str) -> str:
    """Validate and normalise a target URL: ``http(s)://host[:port][/prefix]`` without ``/v1``.

    Raises InputError naming the URL when it is not usable.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"invalid URL {url!r}: expected http://HOST[:PORT]")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise InputError(f"invalid URL {url!r}: {exc}") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def redact_url(url: str) -> str:
    """The URL without user/password, for manifests and logs."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return url


def api_key_from_env(variable: str | None) -> str | None:
    """Read the API key from the environment variable named ``variable`` (never from a flag)."""
    if not variable:
        return None
    value = os.environ.get(variable)
    if not value:
        raise InputError(f"API key variable {variable} is not set in the environment")
    return value


def api_key_from_file(path: str | None) -> str | None:
    """Read the API key from a file (its first line, stripped). Errors name the file, never
    its content."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            value = f.readline().strip()
    except FileNotFoundError:
        raise InputError(f"API key file {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"API key file {path}: cannot read it ({type(exc).__name__})") from None
    if not value:
        raise InputError(f"API key file {path} is empty")
    return value


def read_api_key(env: str | None = None, file: str | None = None) -> str | None:
    """The API key of a target: from the environment variable ``env`` or the file ``file``
    (never from a flag's value, so it stays out of shell history and process lists)."""
    if env and file:
        raise InputError("give the API key by --api-key-env or --api-key-file, not both")
    key = api_key_from_env(env) if env else api_key_from_file(file)
    register_secret(key)
    return key


def _no_first_token(limit_ns: int) -> str:
    return f"no first token within {limit_ns / 1e9:g} s"


def _not_finished(limit_ns: int) -> str:
    return f"request not finished within {limit_ns / 1e9:g} s"


class _Watchdog:
    """Cancels the current task when a deadline passes, remembering which one it was.

    Deadlines: the first token, the whole request, and (once tokens flow) the longest silence
    between reads. The read loop only stores the time of each read in ``last_read_ns``; the
    idle timer looks at it when it fires and re-arms itself for what is left, so a read costs
    no timer operation. Each deadline is judged by the reads' receive stamps too: a read that
    arrived past one (the first token's, the whole request's, or the silence since the read
    before) ends the request as a timeout, though this client was too busy to run its timer in
    time (the verdict is the server's, not the client's lag).
    """

    __slots__ = (
        "_armed_ns", "_deadlines", "_first", "_first_ns", "_idle", "_idle_ns", "_task", "_total", "_total_ns",
        "fired", "last_read_ns",
    )  # fmt: skip

    def __init__(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._deadlines = deadlines.for_loop(asyncio.get_running_loop())
        self._first: deadlines.Deadline | None = None
        self._total: deadlines.Deadline | None = None
        self._idle: deadlines.Deadline | None = None
        self._idle_ns: int | None = None
        self._armed_ns = 0
        self._first_ns: int | None = None
        self._total_ns: int | None = None
        self.fired: str | None = None
        self.last_read_ns = 0

    def _fire(self, reason: str) -> None:
        if self.fired is None:
            self.fired = reason
            self._task.cancel()

    def arm(self, timeouts: Timeouts) -> None:
        self._armed_ns = _perf_ns()
        if timeouts.first_token_s is not None:
            self._first_ns = int(timeouts.first_token_s * 1e9)
            self._first = self._deadlines.call_later(
                timeouts.first_token_s, self._fire, _no_first_token(self._first_ns)
            )
        if timeouts.total_s is not None:
            self._total_ns = int(timeouts.total_s * 1e9)
            self._total = self._deadlines.call_later(timeouts.total_s, self._fire, _not_finished(self._total_ns))
        if timeouts.idle_s is not None:
            self._idle_ns = int(timeouts.idle_s * 1e9)

    def read_at(self, read_ns: int) -> None:
        if self._total_ns is not None and read_ns - self._armed_ns >= self._total_ns:
            raise ExchangeFailure(Status.TIMEOUT, _not_finished(self._total_ns))
        if self._idle is not None and read_ns - self.last_read_ns >= self._idle_ns:  # type: ignore[operator]
            raise ExchangeFailure(Status.TIMEOUT, self._stalled())
        self.last_read_ns = read_ns

    def first_token_seen(self) -> None:
        """Called once, at the read that brought the first token."""
        at_ns = self.last_read_ns or _perf_ns()  # the read's stamp, if it came in one
        if self._first_ns is not None and at_ns - self._armed_ns >= self._first_ns:
            raise ExchangeFailure(Status.TIMEOUT, _no_first_token(self._first_ns))
        if self._first is not None:
            self._first.cancel()
            self._first = None
        if self._idle_ns is not None and self.fired is None:
            self.last_read_ns = at_ns
            self._idle = self._deadlines.call_later(self._idle_ns / 1e9, self._check_idle)

    def _stalled(self) -> str:
        assert self._idle_ns is not None
        return f"stream stalled: no data for {self._idle_ns / 1e9:g} s after the first token"

    def _check_idle(self) -> None:
        assert self._idle_ns is not None
        silent = _perf_ns() - self.last_read_ns
        if silent >= self._idle_ns:
            self._idle = None
            self._fire(self._stalled())
        else:
            self._idle = self._deadlines.call_later((self._idle_ns - silent) / 1e9, self._check_idle)

    def disarm(self) -> None:
        for handle in (self._first, self._total, self._idle):
            if handle is not None:
                handle.cancel()
        self._first = self._total = self._idle = None

    def absorb(self) -> None:
        """Our own cancellation fired: clear it from the task so the caller goes on."""
        uncancel = getattr(self._task, "uncancel", None)
        if uncancel is not None:
            uncancel()


def request_header_id(identity: RequestIdentity) -> str:
    """The ``X-Request-Id`` a request carries: ``RUN_ID/REQUEST_ID`` (the request id alone when
    it has no run): unique across runs, and joinable with the trace's two columns."""
    return f"{identity.run_id}/{identity.request_id}" if identity.run_id else identity.request_id


def timing_clock(reading: StreamReading) -> tuple[str, tuple[int, ...]]:
    """Which clock timed a response's content events (``RequestRecord.clock``) and their lags
    (``RequestRecord.chunk_lag_ns``: none when every event was timed in user space)."""
    events = len(reading.chunk_ns)
    if reading.user_timed >= events:
        return "user", ()
    return ("kernel" if reading.user_timed == 0 else "mixed"), tuple(reading.chunk_lag_ns)


class HttpEngineClient:
    """EngineClient over HTTP for one target (base URL, engine profile, dialect, model)."""

    def __init__(
        self,
        session: Transport | aiohttp.ClientSession,
        base_url: str,
        profile: Engine,
        *,
        target: str = "",
        dialect: str | None = None,
        model: str = "default",
        timeouts: Timeouts | None = None,
        api_key_env: str | None = None,
        api_key: str | None = None,
        generate_cumulative: bool = True,
        wall_clock: Callable[[], int] = time.time_ns,
        measure_send_stamps: bool = False,
    ) -> None:
        #: the connections (an aiohttp session given directly is wrapped as a transport)
        self.transport = as_transport(session)
        self.base_url = normalise_base_url(base_url)
        self.profile = profile
        self.dialect = check_dialect(profile, dialect or profile.default_dialect)
        self.target = target or profile.name
        self.model = model
        self.reads_token_ids = False
        self.reads_prompt_runs = False
        self.timeouts = timeouts or Timeouts()
        self.generate_cumulative = generate_cumulative
        #: wall clock for sent_ns; on a cluster worker it is shifted onto the driver's clock
        self.wall_clock = wall_clock
        #: benchmarks: read the emulator's ``swarm_sent_ns`` stamps (``--stamp-chunks``) and keep,
        #: per content event, receive time minus send time in ``record.extra["stamp_delays_ns"]``
        self.measure_send_stamps = measure_send_stamps
        self.url = self.base_url + PATHS[self.dialect]
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        key = api_key or api_key_from_env(api_key_env)
        register_secret(key)
        if key:
            headers["Authorization"] = f"Bearer {key}"
            self._secret: str | None = key
        else:
            self._secret = None
        try:
            self._endpoint = self.transport.endpoint(
                self.url, headers, base_url=self.base_url, target=self.target
            )
        except ValueError as exc:  # this transport cannot reach the URL: it says why
            raise InputError(f"{redact_url(self.url)}: {exc}") from None

    def _scrub(self, text: str) -> str:
        """An error text fit for a record: every known secret redacted, then truncated."""
        if self._secret and self._secret in text:
            text = text.replace(self._secret, REDACTED)
        return truncate_error(redact(text))

    def encode(self, request: EngineRequest) -> bytes:
        """The request body as bytes; encode ahead of the send time with ``send(payload=...)``."""
        body = build_body(
            self.dialect,
            self.profile,
            model=self.model,
            messages=request.messages,
            max_tokens=request.max_tokens,
            stream=request.stream,
            temperature=request.temperature,
            ignore_eos=request.ignore_eos,
            extra_body=request.extra_body,
        )
        # orjson hands back its whole working buffer (16 KB for a 2 KB body); a request in
        # flight keeps its body, so ten thousand agents would keep 160 MB of slack: copy it
        # into a bytes object of its own length
        return bytes(memoryview(dumps(body)))

    async def send(self, request: EngineRequest, payload: bytes | None = None) -> RequestRecord:
        """Send ``request`` (its body pre-encoded by ``encode`` when ``payload`` is given)."""
        # the body goes to the transport in a box it empties, so that this frame does not keep
        # it alive while the answer streams
        body = [payload if payload is not None else self.encode(request)]
        del payload
        decoder = StreamDecoder(
            self.dialect, self.profile, cumulative=self.generate_cumulative, keep_text=request.keep_text
        )
        chunk_ns: list[int] = []
        status = Status.OK
        error: str | None = None
        watchdog = _Watchdog()
        stamp_delays: list[int] | None = [] if self.measure_send_stamps else None
        identity = request.identity
        if not identity.request_id or identity.target != self.target:
            identity = dataclasses.replace(
                identity,
                request_id=identity.request_id or secrets.token_hex(8),
                target=self.target,
                engine=identity.engine or self.profile.name,
            )
        # the request id goes to the server too (X-Request-Id), so a server's own logs join the
        # trace on it; with the run id in front, as request ids repeat in runs of one seed
        header_id = request_header_id(identity)
        request_id = header_id if _HEADER_SAFE.fullmatch(header_id) else None
        call = Call(self.wall_clock)
        reading = StreamReading(decoder, chunk_ns, call, watchdog, stamp_delays)
        watchdog.arm(self.timeouts)
        try:
            await run_exchange(self._endpoint, body, request_id, request.stream, reading)
            end = _perf_ns()
        except ExchangeFailure as failure:
            end = _perf_ns()
            status, error = failure.status, failure.error
        except asyncio.CancelledError:
            end = _perf_ns()
            if watchdog.fired is None:
                status, error = Status.CANCELLED, "cancelled by the run"
            else:
                watchdog.absorb()
                status, error = Status.TIMEOUT, watchdog.fired
        except Exception as exc:  # a bug of ours: still a row (never a lost request), and logged whole
            end = _perf_ns()
            log.exception("request to %s: the client failed", self.target)
            status, error = Status.CLIENT_ERROR, f"swarm client error: {type(exc).__name__}: {exc}"
        finally:
            watchdog.disarm()
        extra = call.extra
        http_status = call.http_status
        sent_wall, t0 = call.sent_wall, call.t0
        clock, chunk_lag = timing_clock(reading)
        if clock == "kernel" and status is Status.OK:
            end = min(end, reading.last_read_ns)  # the end of the body: its last read's stamp
        if stamp_delays is not None:
            extra["stamp_delays_ns"] = stamp_delays
        if error is not None:
            error = self._scrub(error)
            log.debug("request to %s failed: %s: %s", self.target, status.value, error)
        scheduled = request.scheduled_ns if request.scheduled_ns is not None else sent_wall
        usage = decoder.usage
        return RequestRecord(
            identity=identity,
            dialect=self.dialect,
            model=self.model,
            stream=request.stream,
            scheduled_ns=scheduled,
            sent_ns=sent_wall,
            queue_ns=sent_wall - scheduled,
            slot_wait_ns=request.slot_wait_ns,
            ttft_ns=chunk_ns[0] if chunk_ns else None,
            e2e_ns=end - t0,
            chunk_ns=tuple(chunk_ns),
            clock=clock,
            chunk_lag_ns=chunk_lag,
            replica=call.replica,
            replica_from="header" if call.replica is not None else None,
            status=status,
            http_status=http_status,
            error=error,
            finish_reason=decoder.finish_reason,
            max_tokens=request.max_tokens,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            prompt_tokens_est=request.prompt_tokens_est,
            ideal_cached_tokens_est=request.ideal_cached_tokens_est,
            block_hashes=request.block_hashes,
            prompt_parts=tuple(as_str(m.content) for m in request.messages) if request.keep_text else None,
            prompt_roles=tuple(m.role for m in request.messages) if request.keep_text else None,
            output_text=decoder.text if request.keep_text else None,
            extra=extra,
        )
