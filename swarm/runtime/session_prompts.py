"""SessionPrompts: one agent session's prompts as an engine is sent them, token ids and hashes.

Place in the map (docs/architecture.md, "Runtime"): one a session, owned by
``runtime.agent.AgentRun``, which composes a call's messages (``workload.prompts``) and hands
them here for what the send and its record need besides: the prompt's token ids (each part's
made once and kept, but a corpus-cut text's, copied from the corpus each time), the same ids
laid out as the arrays they come from (for a simulated twin, which reads them only when it
admits the request), where they are the corpus's long shared runs (for the ideal-reuse index),
and the prompt's block hashes carried on from a context parent's prompt, kept until the last
node that extends it is built (a session holds those of its open turns only).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Protocol

from swarm.request import ChatMessage
from swarm.texts import SharedRun, Text, WordText
from swarm.token_ids import LaidOutIds
from swarm.workload.prefix import BLOCK_TOKENS, BlockHashes, block_hashes
from swarm.workload.tokenizer import TokenIds, Tokenizer, WordTokenizer
from swarm.workload.topology import TopologyTemplate


class PromptEnv(Protocol):
    """What a session's prompts read of its swarm (``runtime.agent.AgentEnv``)."""

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def system_prompt_tokens(self) -> dict[Text, TokenIds]: ...

    @property
    def system_prompt_hashes(self) -> dict[Text, BlockHashes]: ...


class SessionPrompts:
    """One session's prompts' token ids, laid-out ids, shared runs and block hashes (the
    module docstring); ``template`` is the session's topology."""

    # slots: a simulated swarm holds one a session, tens of thousands
    __slots__ = ("_blocks", "_extenders_left", "_part_tokens", "env", "template")

    def __init__(self, env: PromptEnv, template: TopologyTemplate) -> None:
        self.env = env
        self.template = template
        #: a built prompt's messages, tokens and block hashes, kept for the nodes that extend it
        #: (``known_blocks``), and how many of those are still to be built
        self._blocks: dict[str, tuple[tuple[ChatMessage, ...], int, BlockHashes]] = {}
        self._extenders_left: dict[str, int] = {}
        # token ids of each prompt part, computed once; arrays, which the garbage collector
        # does not walk, so thousands of agents' prompts cost nothing in its collections (a
        # corpus-cut text's are copied from the corpus's at each prompt instead: ``sliced``)
        self._part_tokens: dict[Text, TokenIds] = {}

    # -- token ids -----------------------------------------------------------------------------

    def sliced(self, message: ChatMessage) -> bool:
        """Whether ``message``'s ids are copied from the corpus's each time its prompt is composed
        (a ``WordText`` under word tokens, but the shared system prompt) rather than held as a
        part's: kept, they were a seventh of a 2,000-agent simulation's memory, a copy of ids the
        corpus holds once."""
        words = isinstance(self.env.tokenizer, WordTokenizer)
        return type(message.content) is WordText and message.role != "system" and words

    def has_part(self, content: Text) -> bool:
        """Whether a part's ids are kept (``tokens`` made them, or ``keep_part``)."""
        return content in self._part_tokens

    def keep_part(self, content: Text, tokens: TokenIds) -> None:
        """Keep ``tokens`` as the ids of the part ``content`` (made a slice at a time)."""
        self._part_tokens[content] = tokens

    def tokens(self, messages: tuple[ChatMessage, ...]) -> TokenIds:
        """A prompt's token ids, its parts' in order (the system prompt's shared by the swarm)."""
        ids = self.env.tokenizer.ids
        cache = self._part_tokens
        words = isinstance(self.env.tokenizer, WordTokenizer)
        tokens: TokenIds = array("q")
        for m in messages:
            content = m.content
            if words and type(content) is WordText and m.role != "system":  # ``sliced``
                content.extend_ids(tokens)
                continue
            part = cache.get(content)
            if part is None:
                if m.role == "system":  # shared by the swarm: one array for every agent
                    shared = self.env.system_prompt_tokens
                    part = shared.get(m.content)
                    if part is None:
                        part = shared[m.content] = ids(m.content)
                else:
                    part = ids(m.content)
                cache[m.content] = part
            tokens += part
        return tokens

    def laid_out(self, messages: tuple[ChatMessage, ...], tokens: TokenIds) -> LaidOutIds | TokenIds:
        """``tokens`` (``tokens`` of ``messages``, word tokens) as the arrays they were laid out
        from (the parts' ids kept here, the corpus's), for a twin that reads them only when it
        admits the request: in flight, a prompt then costs a few bytes a part, not 8 a token.
        ``tokens`` itself where a part's ids are not kept or the pieces do not add up."""
        cache = self._part_tokens
        pieces: list[tuple[TokenIds, int, int]] = []
        for m in messages:
            content = m.content
            if type(content) is WordText and m.role != "system":  # ``sliced``
                pieces.extend(content.id_pieces())
                continue
            part = cache.get(content)
            if part is None:
                return tokens
            pieces.append((part, 0, len(part)))
        laid_out = LaidOutIds(pieces)
        return laid_out if len(laid_out) == len(tokens) else tokens

    def shared_runs(self, messages: tuple[ChatMessage, ...], n_tokens: int) -> list[SharedRun]:
        """Where a prompt's tokens (``tokens`` of ``messages``, ``n_tokens`` of them) are the
        corpus's (its long texts'), for the ideal-reuse index to hold by reference
        (``PrefixIndex.observe``); none where a part's length is not known here or the places
        would not add up to the prompt's."""
        runs: list[SharedRun] = []
        words = isinstance(self.env.tokenizer, WordTokenizer)
        if not words or not any(type(m.content) is WordText for m in messages):
            return runs  # short texts only (the anchors' chain): no walk of the parts
        cache, system = self._part_tokens, self.env.system_prompt_tokens
        at = 0
        for m in messages:
            content = m.content
            if self.sliced(m) and isinstance(content, WordText):  # as ``tokens`` lays it out
                runs.extend(content.shared_runs(at))
                at += content.words
                continue
            part = cache.get(content)
            if part is None:
                part = system.get(content) if m.role == "system" else None
                if part is None:
                    return []
            at += len(part)
        return runs if runs and at == n_tokens else []

    # -- a parent's prompt, kept for the nodes that extend it ----------------------------------

    def kept_messages(self, node: str) -> tuple[ChatMessage, ...] | None:
        """``node``'s prompt's messages, while they are kept for the nodes that extend it."""
        memo = self._blocks.get(node)
        return memo[0] if memo is not None else None

    def expected_tokens_of(self, node: str) -> int:
        """How long ``node``'s prompt was, when its block hashes are still kept."""
        memo = self._blocks.get(node)
        return memo[1] if memo is not None else self.expected_tokens(node)

    def expected_tokens(self, node: str) -> int:
        """At least how long ``node``'s prompt is: its longest context parent's prompt (whose
        block hashes are kept until its extenders are built), for the time it takes to build."""
        memos = (self._blocks.get(p) for p in self.template.context_parents(node))
        return max((memo[1] for memo in memos if memo is not None), default=0)

    def known_blocks(self, node: str, messages: tuple[ChatMessage, ...]) -> Sequence[int]:
        """The block hashes of ``node``'s prompt that a context parent's prompt already has: its
        whole blocks, when its messages begin ``node``'s (no compaction nor stripped reasoning
        between them). A 130k-token prompt then hashes its last turn, not all of it."""
        for p in self.template.context_parents(node):
            memo = self._blocks.get(p)
            if memo is None:
                continue
            parent_messages, parent_tokens, hashes = memo
            if messages[: len(parent_messages)] == parent_messages:
                return hashes[: parent_tokens // BLOCK_TOKENS]
        return self.system_blocks(messages)

    def system_blocks(self, messages: tuple[ChatMessage, ...]) -> BlockHashes | tuple[()]:
        """The block hashes of a prompt's whole blocks within its system prompt (its first
        tokens: ``tokens``), made once for the swarm; () without one."""
        if not messages or messages[0].role != "system":
            return ()
        content = messages[0].content
        env = self.env
        hashes = env.system_prompt_hashes.get(content)
        if hashes is None:
            ids = env.system_prompt_tokens.get(content)
            if ids is None:  # not composed yet: the prompt's own hashes will do
                return ()
            whole = len(ids) // BLOCK_TOKENS * BLOCK_TOKENS
            hashes = env.system_prompt_hashes[content] = block_hashes(ids[:whole])
        return hashes

    def remember_blocks(
        self, node: str, messages: tuple[ChatMessage, ...], tokens: int, hashes: BlockHashes
    ) -> None:
        """Keep a prompt's block hashes for the nodes that extend it, until the last of them
        is built (a session holds those of its open turns only)."""
        t = self.template
        for p in t.context_parents(node):
            left = self._extenders_left.get(p)
            if left is not None:
                if left <= 1:
                    self._extenders_left.pop(p, None)
                    self._blocks.pop(p, None)
                else:
                    self._extenders_left[p] = left - 1
        extenders = sum(1 for c in t.graph.successors(node) if node in t.context_parents(c))
        if extenders and node not in self._blocks:
            self._blocks[node] = (messages, tokens, hashes)
            self._extenders_left[node] = extenders
