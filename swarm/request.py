"""The value types shared by request sources and clients: what one LLM call is, and its limits.

Place in the map (docs/architecture.md, "Shared value types"): below the EngineClient and beside
``swarm.record``. Agents, the replay and the cluster build ``EngineRequest``s of
``ChatMessage``s and hand ``Timeouts`` to a client; ``swarm.clients`` reads them. This module
imports only the standard library, ``swarm.record``, ``swarm.texts`` and ``swarm.token_ids``
(themselves standard library only), so a request source can build requests
without importing the client package (aiohttp, the HTTP/1.1 client, the dialects).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarm.record import RequestIdentity
from swarm.texts import SharedRun, Text
from swarm.token_ids import LaidOutIds


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a prompt: its role (``system``, ``user``, ``assistant``) and its text (a
    ``WordText`` is made into characters where a client sends or records it: ``as_str``)."""

    role: str
    content: Text


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One LLM call, engine-neutral. Dialects render it (chat messages or one prompt string)."""

    messages: tuple[ChatMessage, ...]
    max_tokens: int | None
    identity: RequestIdentity = field(default_factory=RequestIdentity)
    scheduled_ns: int | None = None
    stream: bool = True
    temperature: float = 0.0
    ignore_eos: bool = True
    prompt_tokens_est: int | None = None
    #: time this request waited for a free slot under the in-flight cap, before ``send``
    slot_wait_ns: int = 0
    ideal_cached_tokens_est: int | None = None
    #: the prompt's 64-token block hashes (an agent's: ``array("Q")``, 8 bytes a block)
    block_hashes: Sequence[int] = ()
    extra_body: Mapping[str, Any] | None = None
    #: Keep the prompt parts and the output text in the record (``--record-text``, or an agent
    #: that feeds real outputs to its children).
    keep_text: bool = False
    #: the prompt's tokens as the sender holds them, the ids of its messages' whitespace words
    #: in order (``swarm.token_ids``), given only to a client that reads them
    #: (``EngineClient.reads_token_ids``: a simulated twin, which then need not tokenise the
    #: text again), as one array or laid out (``LaidOutIds``: an agent's, which a twin makes
    #: into one array only when it admits the request); None: not given
    prompt_ids: array[int] | LaidOutIds | None = field(default=None, repr=False, compare=False)
    #: where ``prompt_ids`` are stretches of the corpus's ids (``SharedRun``s, in order), given
    #: with them to a client that reads them (``EngineClient.reads_prompt_runs``: a simulated
    #: fleet whose router's tree holds them by reference, ``sim.router_tree``); () otherwise
    prompt_runs: tuple[SharedRun, ...] = field(default=(), repr=False, compare=False)


@dataclass(frozen=True)
class Timeouts:
    """Limits in seconds; ``None`` disables one. ``idle_s``: longest silence mid-stream."""

    connect_s: float | None = 10.0
    first_token_s: float | None = 120.0
    total_s: float | None = 600.0
    idle_s: float | None = 60.0
