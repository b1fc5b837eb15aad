"""A page opened in a real headless Chromium, driven over the DevTools protocol.

Used by the HTML report test: load a file, collect console errors and uncaught exceptions,
evaluate an expression in the page, take a screenshot. Chromium is Debian's package
(``/usr/bin/chromium``, installed by ``.ci/run``); its flags keep it off the network.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-port=0", "--window-size=1400,2000",
]  # fmt: skip


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class PageVisit:
    errors: list[str] = field(default_factory=list)
    value: Any = None
    screenshot: Path | None = None


def visit(
    page: Path, expression: str, screenshot: Path, profile_dir: Path, timeout_s: float = 60
) -> PageVisit:
    """Open ``page``, wait for its load event, evaluate ``expression`` (JSON-able result),
    save a PNG screenshot; console errors and exceptions are in ``errors``."""
    binary = chromium_path()
    assert binary is not None, "chromium is not installed"
    proc = subprocess.Popen(
        [binary, *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while not port_file.is_file() or not port_file.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        return asyncio.run(asyncio.wait_for(_drive(port, page, expression, screenshot), timeout_s))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _drive(port: int, page: Path, expression: str, screenshot: Path) -> PageVisit:
    result = PageVisit()
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json()
        ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
        async with session.ws_connect(ws_url, max_msg_size=0) as ws:
            next_id = 0
            loaded = asyncio.Event()
            replies: dict[int, asyncio.Future[dict[str, Any]]] = {}

            async def reader() -> None:
                async for msg in ws:
                    data = json.loads(msg.data)
                    if "id" in data and data["id"] in replies:
                        replies.pop(data["id"]).set_result(data)
                    method = data.get("method")
                    params = data.get("params", {})
                    if method == "Page.loadEventFired":
                        loaded.set()
                    elif method == "Runtime.exceptionThrown":
                        result.errors.append(json.dumps(params.get("exceptionDetails", {}))[:500])
                    elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                        result.errors.append(json.dumps(params.get("args", []))[:500])
                    elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                        result.errors.append(params["entry"].get("text", "")[:500])

            async def call(method: str, **params: Any) -> dict[str, Any]:
                nonlocal next_id
                next_id += 1
                future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
                replies[next_id] = future
                await ws.send_str(json.dumps({"id": next_id, "method": method, "params": params}))
                reply = await future
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

            task = asyncio.get_running_loop().create_task(reader())
            try:
                for domain in ("Page", "Runtime", "Log"):
                    await call(f"{domain}.enable")
                await call("Page.navigate", url=page.resolve().as_uri())
                await loaded.wait()
                evaluated = await call("Runtime.evaluate", expression=expression, returnByValue=True)
                result.value = evaluated.get("result", {}).get("value")
                shot = await call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
                screenshot.write_bytes(base64.b64decode(shot["data"]))
                result.screenshot = screenshot
            finally:
                task.cancel()
    return result
