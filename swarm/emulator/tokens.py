"""The emulator's tokenizer and its text generator.

Place in the map (docs/architecture.md, "The emulator"): a token is a whitespace-separated word, so the
prompt token count of any text is ``len(text.split())``, exact and knowable by the client. The
engine model holds tokens as ids (``swarm.token_ids``: a word's id is its hash), the ids a
client holds of the same words. For
chat requests the tokens are the words of every message's content in order (no template
tokens), so a chat prompt and the same parts joined into one completions prompt count alike.

Generated text is a deterministic sequence of capitalised words from a fixed vocabulary,
seeded by the prompt, so the same prompt always gets the same answer (replays and A/B runs see identical
outputs) and a child that repeats its parent's output in its prompt hits the cached tokens.
"""

from __future__ import annotations

import random
import zlib
from array import array
from collections.abc import Iterable
from typing import Any

from swarm.errors import InputError
from swarm.token_ids import LaidOutIds, PromptIds, TokenIds, word_ids

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "st")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")
_CODAS = ("", "n", "r", "s", "l", "x")

#: 672 distinct pronounceable words (onset + vowel + coda), capitalised so they never equal
#: the lowercase words of swarm's synthesised prompts.
VOCAB: tuple[str, ...] = tuple((o + v + c).capitalize() for o in _ONSETS for v in _VOWELS for c in _CODAS)


def tokenize(text: str) -> TokenIds:
    """Tokens of ``text``: its whitespace-separated words, as ids (``swarm.token_ids``)."""
    return word_ids(text.split())


def tokenize_parts(parts: Iterable[str]) -> TokenIds:
    """Tokens of several prompt parts (chat message contents), concatenated."""
    out: TokenIds = array("q")
    for part in parts:
        out += word_ids(part.split())
    return out


class PromptTokenizer:
    """Prompts into token ids: whitespace words (``tokenize``), or with ``path`` the ids of a
    Hugging Face ``tokenizer.json``, to count as a real server does: a completions prompt with
    the tokenizer's special tokens (``<bos>``), a chat's message contents one after another
    without them and without a chat template (so close to, not equal to, the server's)."""

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

    @property
    def words(self) -> bool:
        """Whether a token is a whitespace word (no ``tokenizer.json``): the word ids a client
        holds are this tokenizer's."""
        return self._hf is None

    def text(self, text: str) -> TokenIds:
        if self._hf is None:
            return tokenize(text)
        return array("q", self._hf.encode(text).ids)

    def parts(self, parts: Iterable[str]) -> TokenIds:
        if self._hf is None:
            return tokenize_parts(parts)
        out: TokenIds = array("q")
        for part in parts:
            out.extend(self._hf.encode(part, add_special_tokens=False).ids)
        return out


#: the generated text: one fixed sequence of ``VOCAB`` words drawn once (a fixed seed), which a
#: request reads from a place its prompt picks (``output_start``), round to the start past its
#: end: as random to a cache as a draw per request, without drawing (a tenth of a simulation)
OUTPUT_WORDS: tuple[str, ...] = tuple(random.Random("swarm:emulator:output").choices(VOCAB, k=1 << 16))
#: the ids of ``OUTPUT_WORDS`` (generated tokens enter the prefix cache as ids)
OUTPUT_IDS: TokenIds = word_ids(OUTPUT_WORDS)


def output_start(prompt: PromptIds) -> int:
    """Where in ``OUTPUT_WORDS`` the answer to ``prompt`` starts: a deterministic function of
    its last 64 token ids and its length."""
    last = prompt.last(64) if isinstance(prompt, LaidOutIds) else prompt[-64:]
    return (zlib.crc32(last.tobytes()) ^ (len(prompt) << 20)) % len(OUTPUT_WORDS)


def output_ids(start: int, first: int, count: int) -> TokenIds:
    """The ids of tokens ``first`` to ``first + count`` of the answer starting at ``start``."""
    n = len(OUTPUT_IDS)
    at = (start + first) % n
    if at + count <= n:
        return OUTPUT_IDS[at : at + count]
    out = OUTPUT_IDS[at:]
    while len(out) < count:
        out += OUTPUT_IDS[: count - len(out)]
    return out
