"""Each fault the emulator injects becomes a row with its own status and error text.

The emulator runs in process with one fault kind at rate 1; the client has short deadlines
(first token 0.5 s, silence mid-stream 0.5 s) and the stalls last 1.5 s.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from transports import TRANSPORT, transport  # noqa: F401 - each test runs once per transport

from swarm.clients.client import HttpEngineClient, open_transport
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.faults import REQUEST_KINDS, FaultInjector, FaultSpec
from swarm.emulator.http_server import start_emulator
from swarm.engines.registry import get_engine
from swarm.errors import InputError
from swarm.record import RequestRecord, Status
from swarm.request import ChatMessage, EngineRequest, Timeouts

SHORT = Timeouts(connect_s=5, first_token_s=0.5, total_s=20, idle_s=0.5)


async def _send_with_fault(
    kind: str, *, stream: bool = True, sends: int = 2, max_tokens: int = 8
) -> tuple[list[RequestRecord], dict[str, object]]:
    spec = FaultSpec.parse(f"{kind}=1,stall_s=1.5,slow_headers_s=1.5,oversized_bytes=5000000,seed=3")
    emu = await start_emulator(EmulatorConfig(port=0, timing="zero", faults=spec))
    try:
        async with open_transport(emu.url, kind=TRANSPORT["kind"]) as session:
            client = HttpEngineClient(session, emu.url, get_engine("sglang"), timeouts=SHORT)
            records = [
                await client.send(
                    EngineRequest(
                        messages=(ChatMessage("user", "what is two and two"),),
                        max_tokens=max_tokens,
                        stream=stream,
                    )
                )
                for _ in range(sends)
            ]
        if kind == "refuse":  # the counts' own request would be refused: read them in process
            assert emu.faults is not None
            counts = emu.faults.snapshot()
        else:
            counts = await asyncio.to_thread(_get_json, emu.url + "/swarm/faults")
    finally:
        await emu.close()
    return records, counts


def _get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        data: dict[str, object] = json.load(resp)
    return data


CASES = [
    ("refuse", Status.CONNECT_ERROR, None, "connection closed by the server before a response"),
    ("http_500", Status.HTTP_ERROR, 500, "HTTP 500: injected fault: internal server error"),
    ("http_503", Status.HTTP_ERROR, 503, "HTTP 503: injected fault: service unavailable"),
    ("http_429", Status.HTTP_ERROR, 429, "HTTP 429: injected fault: too many requests (Retry-After: 1 s)"),
    ("slow_headers", Status.TIMEOUT, None, "no first token within 0.5 s"),
    ("stall_first", Status.TIMEOUT, 200, "no first token within 0.5 s"),
    ("stall_mid", Status.TIMEOUT, 200, "stream stalled: no data for 0.5 s after the first token"),
    ("cut", Status.STREAM_ERROR, 200, "connection broken: "),
    ("malformed", Status.STREAM_ERROR, 200, "invalid JSON in stream event"),
    ("no_done", Status.STREAM_ERROR, 200, "stream ended without [DONE]"),
    ("oversized", Status.STREAM_ERROR, 200, "event-stream line longer than 4194304 bytes"),
]


def test_every_kind_has_a_case() -> None:
    assert {c[0] for c in CASES} == {"refuse", *REQUEST_KINDS}


@pytest.mark.parametrize(("kind", "status", "http_status", "text"), CASES, ids=[c[0] for c in CASES])
async def test_each_fault_is_a_row_with_its_status_and_text(
    kind: str, status: Status, http_status: int | None, text: str
) -> None:
    records, counts = await _send_with_fault(kind)
    for r in records:
        assert r.status is status, (r.status, r.error)
        assert r.http_status == http_status
        assert r.error is not None and text in r.error, r.error
        assert r.e2e_ns is not None and r.e2e_ns >= 0
    injected = counts["injected"]
    assert isinstance(injected, dict)
    assert injected[kind] == 2  # what the server did matches what the client recorded
    assert sum(injected.values()) == 2


async def test_429_keeps_retry_after_for_a_retry_policy() -> None:
    records, _ = await _send_with_fault("http_429", sends=1)
    assert records[0].extra["retry_after_s"] == 1.0


async def test_stream_faults_before_the_cut_keep_the_tokens_that_came() -> None:
    records, _ = await _send_with_fault("cut", sends=1, max_tokens=16)
    assert 1 <= len(records[0].chunk_ns) < 16  # half the answer came before the cut


@pytest.mark.parametrize(
    ("kind", "status", "text"),
    [
        ("http_503", Status.HTTP_ERROR, "HTTP 503"),
        ("stall_first", Status.TIMEOUT, "no first token within 0.5 s"),
        ("cut", Status.CONNECT_ERROR, "before a response"),  # the cut comes before any header
    ],
)
async def test_faults_of_non_streamed_requests(kind: str, status: Status, text: str) -> None:
    records, _ = await _send_with_fault(kind, stream=False, sends=1)
    assert records[0].status is status and text in (records[0].error or "")


async def test_stream_only_faults_are_not_injected_into_non_streamed_requests() -> None:
    records, counts = await _send_with_fault("no_done", stream=False, sends=2)
    assert all(r.ok for r in records)
    assert counts["injected"] == {"refuse": 0, **{k: 0 for k in REQUEST_KINDS}}


def test_spec_text_form() -> None:
    spec = FaultSpec.parse("mixed=0.05, stall_s=2, seed=7, refuse=0.01")
    assert spec.seed == 7 and spec.stall_s == 2 and spec.refuse == 0.01
    assert all(getattr(spec, k) == pytest.approx(0.005) for k in REQUEST_KINDS)
    assert FaultSpec.parse("http_500=0.2,mixed=0.1").http_500 == 0.2  # an explicit rate wins
    for bad, named in [
        ("explode=0.1", "unknown key 'explode'"),
        ("http_500", "not KIND=RATE"),
        ("cut=lots", "cut: 'lots' is not a number"),
        ("cut=1.5", "cut"),
        ("http_500=0.6,http_503=0.6", "add up to 1.2"),
        ("mixed=2", "mixed=2"),
    ]:
        with pytest.raises(InputError, match=named.replace("(", r"\(").replace("[", r"\[")):
            FaultSpec.parse(bad)


def test_draws_are_seeded() -> None:
    def kinds(seed: int) -> list[str | None]:
        injector = FaultInjector(FaultSpec.parse(f"mixed=0.3,seed={seed}"))
        return [injector.draw(stream=True) for _ in range(500)]

    assert kinds(1) == kinds(1)
    assert kinds(1) != kinds(2)
    drawn = kinds(1)
    assert 0.22 < sum(k is not None for k in drawn) / 500 < 0.38
    assert set(drawn) - {None} == set(REQUEST_KINDS)


async def test_the_emulator_logs_each_fault_under_the_clients_request_id() -> None:
    """The client sends its request id (X-Request-Id); the emulator's fault log is keyed by it,
    so a trace's failed rows can be joined with what the server did."""
    from swarm.clients.client import request_header_id
    from swarm.record import RequestIdentity

    spec = FaultSpec.parse("http_500=0.5,cut=0.3,seed=5")
    emu = await start_emulator(EmulatorConfig(port=0, timing="zero", faults=spec))
    try:
        async with open_transport(emu.url, kind=TRANSPORT["kind"]) as session:
            client = HttpEngineClient(session, emu.url, get_engine("sglang"), timeouts=SHORT)
            records = [
                await client.send(
                    EngineRequest(
                        messages=(ChatMessage("user", "go"),),
                        max_tokens=4,
                        identity=RequestIdentity(
                            run_id="run-1" if i % 2 else "", request_id=f"agent-{i}:t.0" if i % 5 else ""
                        ),
                    )
                )
                for i in range(40)
            ]
        log = await asyncio.to_thread(_get_json, emu.url + "/swarm/faults?by_request=1")
    finally:
        await emu.close()
    by_request = log["by_request"]
    assert isinstance(by_request, dict) and log["by_request_complete"] is True
    expected = {"http_500": Status.HTTP_ERROR, "cut": Status.STREAM_ERROR}
    for r in records:  # RUN_ID/REQUEST_ID; an id made up by the client (none given) is sent as well
        assert r.identity.request_id
        key = request_header_id(r.identity)
        assert key == (f"run-1/{r.identity.request_id}" if r.identity.run_id else r.identity.request_id)
        if r.ok:
            assert key not in by_request
        else:
            assert expected[by_request[key]] is r.status
    assert len(by_request) == sum(not r.ok for r in records) > 0
