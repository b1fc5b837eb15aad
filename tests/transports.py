"""Run a test module's client tests on both transports: swarm's own HTTP/1.1 client and aiohttp.

A module does ``from transports import TRANSPORT, transport`` and opens its connections with
``open_transport(url, kind=TRANSPORT["kind"])``; the autouse fixture runs each of its tests once
per transport.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

#: which transport the client uses in the current test
TRANSPORT = {"kind": "aiohttp"}


@pytest.fixture(autouse=True, params=["aiohttp", "h1"])
def transport(request: pytest.FixtureRequest) -> Iterator[str]:
    TRANSPORT["kind"] = request.param
    yield request.param
    TRANSPORT["kind"] = "aiohttp"
