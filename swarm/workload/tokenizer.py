"""Tokenizers the Workload counts and hashes prompts with.

Place in the map (docs/architecture.md, "Workload"): ``WordTokenizer`` is the emulator's tokenizer (a
token is a whitespace-separated word), so counts are exact against the emulator. With
``--tokenizer tokenizer.json`` a Hugging Face ``tokenizers`` file (optional extra
``swarm-loadgen[tokenizer]``) gives close counts for a real model. Chat prompts are counted
part by part (each message's content), so template tokens an engine adds are not counted.

``ids`` gives a text's tokens as the client holds them: an ``array('q')`` of token ids (a
word's id is a hash of its bytes, the same in every process; a Hugging Face token's its
vocabulary id). An array is one block of memory that the garbage collector does not walk
element by element: a 150k-token prompt held as a list of words made each young collection
that met it walk 150k pointers (3-10 ms passes in the README's default run, each a send
late). The ids and ``word_ids`` are ``swarm.token_ids``'s, shared with the emulator.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from sys import intern
from typing import Protocol

from swarm.errors import InputError
from swarm.texts import Text, WordText
from swarm.token_ids import TokenIds, as_token_ids, word_ids

__all__ = ["HFTokenizer", "TokenIds", "Tokenizer", "WordText", "WordTokenizer", "as_token_ids", "get_tokenizer", "word_ids"]


class Tokenizer(Protocol):
    name: str

    def encode(self, text: Text) -> Sequence[str] | Sequence[int]: ...

    def ids(self, text: Text) -> TokenIds:
        """``text``'s tokens as ids (``as_token_ids(encode(text))``)."""
        ...

    def count(self, text: Text) -> int:
        """How many tokens ``text`` has (``len(encode(text))``, without keeping them)."""
        ...


#: what ``str.split`` splits ASCII text at besides the space
_OTHER_ASCII_WHITESPACE = "\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"


class WordTokenizer:
    """Whitespace words: exact for swarm's emulator."""

    name = "words"

    def encode(self, text: Text) -> list[str]:
        # interned: the same word in thousands of agents' prompts is then one object, not one
        # ~50-byte string per occurrence (the vocabulary is small, the prompts are many)
        return list(map(intern, str(text).split()))

    def ids(self, text: Text) -> TokenIds:
        if isinstance(text, WordText):
            return text.token_ids()
        return word_ids(text.split())

    def ids_in_steps(self, text: Text, chars_per_step: int = 65_536) -> Iterator[TokenIds]:
        """``ids(text)`` in pieces of about ``chars_per_step`` characters, each cut at a space
        (so no word is cut): a caller that must not hold its event loop long yields between
        them. The pieces joined are ``ids(text)`` (a ``WordText``'s in one piece: slices)."""
        if isinstance(text, WordText):
            yield text.token_ids()
            return
        start, n = 0, len(text)
        while start < n:
            cut = text.find(" ", start + chars_per_step) if start + chars_per_step < n else -1
            end = n if cut < 0 else cut
            yield word_ids(text[start:end].split())
            start = end

    def count(self, text: Text) -> int:
        """``len(text.split())``, without making the words: where the only whitespace is single
        spaces between words (synthesised text), the spaces plus one (a fourth of the time)."""
        if isinstance(text, WordText):
            return text.words
        if (
            text.isascii() and text and text[0] != " " and text[-1] != " "
            and not any(c in text for c in _OTHER_ASCII_WHITESPACE) and "  " not in text
        ):  # fmt: skip
            return text.count(" ") + 1
        return len(text.split())


class HFTokenizer:
    """A local Hugging Face ``tokenizer.json`` (needs the ``tokenizers`` package)."""

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer as _HF
        except ImportError:
            raise InputError(
                "--tokenizer needs the 'tokenizers' package: pip install 'swarm-loadgen[tokenizer]'"
            ) from None
        p = Path(path)
        if not p.is_file():
            raise InputError(f"{p}: tokenizer file not found")
        try:
            self._tok = _HF.from_file(str(p))
        except Exception as exc:  # the library raises a bare Exception for bad files
            raise InputError(f"{p}: not a tokenizer.json: {exc}") from exc
        self.name = f"hf:{p.name}"

    def encode(self, text: Text) -> list[int]:
        return list(self._tok.encode(str(text), add_special_tokens=False).ids)

    def ids(self, text: Text) -> TokenIds:
        return array("q", self._tok.encode(str(text), add_special_tokens=False).ids)

    def count(self, text: Text) -> int:
        return len(self._tok.encode(str(text), add_special_tokens=False).ids)


def counted_by_words(text: Text, tokenizer: Tokenizer) -> bool:
    """Whether ``text``'s token count is its ``WordText.words`` (a ``WordText`` under word
    tokens): read at once, where other counts are memoised."""
    return type(text) is WordText and type(tokenizer) is WordTokenizer


def get_tokenizer(path: str | None) -> Tokenizer:
    return WordTokenizer() if not path else HFTokenizer(path)
