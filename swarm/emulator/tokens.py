"""The emulator's tokenizer and its text generator.

Place in the map (docs/architecture.md, "The emulator"): a token is a whitespace-separated word, so the
prompt token count of any text is ``len(text.split())``, exact and knowable by the client. For
chat requests the tokens are the words of every message's content in order (no template
tokens), so a chat prompt and the same parts joined into one completions prompt count alike.

Generated text is a deterministic sequence of capitalised words from a fixed vocabulary,
seeded by the prompt, so the same prompt always gets the same answer (replays and A/B runs see identical
outputs) and a child that repeats its parent's output in its prompt hits the cached tokens.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterable
from typing import Any

from swarm.errors import InputError

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "st")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")
_CODAS = ("", "n", "r", "s", "l", "x")

#: 672 distinct pronounceable words (onset + vowel + coda), capitalised so they never equal
#: the lowercase words of swarm's synthesised prompts.
VOCAB: tuple[str, ...] = tuple((o + v + c).capitalize() for o in _ONSETS for v in _VOWELS for c in _CODAS)


def tokenize(text: str) -> list[str]:
    """Tokens of ``text``: its whitespace-separated words."""
    return text.split()


def tokenize_parts(parts: Iterable[str]) -> list[str]:
    """Tokens of several prompt parts (chat message contents), concatenated."""
    out: list[str] = []
    for part in parts:
        out.extend(part.split())
    return out


class PromptTokenizer:
    """Prompts into tokens: whitespace words (``tokenize``), or with ``path`` the ids of a
    Hugging Face ``tokenizer.json`` (as strings), to count as a real server does: a completions
    prompt with the tokenizer's special tokens (``<bos>``), a chat's message contents one after
    another without them and without a chat template (so close to, not equal to, the server's)."""

    def __init__(self, path: str | None = None) -> None:
        self._hf: Any = None
        if path is not None:
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise InputError(
                    "--tokenizer needs the 'tokenizers' package (pip install tokenizers)"
                ) from None
            try:
                self._hf = Tokenizer.from_file(path)
            except Exception as exc:  # the library raises a bare Exception for a bad file
                raise InputError(f"{path}: not a tokenizer.json: {exc}") from exc

    def text(self, text: str) -> list[str]:
        if self._hf is None:
            return tokenize(text)
        return [str(i) for i in self._hf.encode(text).ids]

    def parts(self, parts: Iterable[str]) -> list[str]:
        if self._hf is None:
            return tokenize_parts(parts)
        out: list[str] = []
        for part in parts:
            out.extend(str(i) for i in self._hf.encode(part, add_special_tokens=False).ids)
        return out


def output_words(prompt_tokens: list[str], count: int) -> list[str]:
    """``count`` generated words, a deterministic function of the prompt."""
    if count <= 0:
        return []
    tail = " ".join(prompt_tokens[-64:])
    seed = zlib.crc32(tail.encode("utf-8")) ^ (len(prompt_tokens) << 20)
    return random.Random(seed).choices(VOCAB, k=count)
