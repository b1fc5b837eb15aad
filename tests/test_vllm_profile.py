"""The emulator's vllm profile without a real server: its cache reset answers as vLLM's does,
the sweep's reset retries a refusal, and prompts can be counted in a model's own tokens."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from swarm.emulator.http_server import EmulatorThread
from swarm.emulator.tokens import PromptTokenizer
from swarm.errors import InputError
from swarm.runtime.cache_reset import reset_prefix_cache
from swarm.runtime.context import ResolvedTarget
from swarm.token_ids import word_ids


def test_reset_prefix_cache_answers_as_vllm_does(emulator: Callable[..., EmulatorThread]) -> None:
    emu = emulator(engine="vllm", timing="zero")
    request = urllib.request.Request(emu.url + "/reset_prefix_cache", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200 and json.loads(resp.read()) == {"success": True}


@pytest.fixture
def refusing_vllm() -> Iterator[tuple[str, list[int]]]:
    """A stand-in vLLM whose reset answers 200 ``{"success": false}`` twice, then true."""
    calls: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            calls.append(1)
            body = json.dumps({"success": len(calls) > 2}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", calls
    server.shutdown()


def test_a_reset_refused_with_success_false_is_retried_then_reported(
    refusing_vllm: tuple[str, list[int]],
) -> None:
    url, calls = refusing_vllm
    target = ResolvedTarget(name="v", url=url, engine="vllm", dialect="openai-chat", model="m")
    assert reset_prefix_cache(target, retry_s=5) == "POST /reset_prefix_cache"
    assert len(calls) == 3
    calls.clear()  # refused twice again; with no time to retry, the reset is reported as failed
    assert reset_prefix_cache(target, retry_s=0).startswith("failed")


def _word_level_tokenizer(path: Path) -> Path:
    """A tiny tokenizer.json: whole words, and a <bos> prepended as the model's own adds it."""
    vocab = {"<unk>": 0, "<bos>": 1, "hello": 2, "world": 3, "again": 4}
    spec = {
        "version": "1.0",
        "added_tokens": [{"id": 1, "content": "<bos>", "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                           "special_tokens": {"<bos>": {"id": "<bos>", "ids": [1], "tokens": ["<bos>"]}}},
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }  # fmt: skip
    path.write_text(json.dumps(spec))
    return path


def test_prompts_count_in_a_models_tokens_when_given_its_tokenizer(tmp_path: Path) -> None:
    tokens = PromptTokenizer(str(_word_level_tokenizer(tmp_path / "tokenizer.json")))
    assert list(tokens.text("hello world")) == [1, 2, 3]  # a completions prompt: with <bos>
    assert list(tokens.parts(["hello", "world again"])) == [2, 3, 4]  # chat contents: without
    assert PromptTokenizer().text("hello world") == word_ids(["hello", "world"])  # default: words
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(InputError, match=r"not a tokenizer\.json"):
        PromptTokenizer(str(tmp_path / "bad.json"))


def test_the_probe_reads_the_kv_pool_and_block_size_vllm_states(emulator: Callable[..., EmulatorThread]) -> None:
    """vLLM's ``vllm:cache_config_info`` names its block size and its KV pool in tokens
    (``kv_cache_size_tokens``, vllm 0.32); the twin states both, and ``swarm calibrate`` takes
    them for the twin's KV and prefix cache (one pool in vLLM)."""
    import asyncio

    from swarm.clients.probe import probe

    emu = emulator(engine="vllm", timing="zero", kv_capacity_tokens=11_959)
    found = asyncio.run(probe(emu.url, send_requests=False))
    assert found.engine == "vllm" and found.block_tokens == 128 and found.kv_tokens == 11_959
