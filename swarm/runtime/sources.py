"""RequestSource: what a target run sends, as the Dispatcher sees it.

Place in the map (docs/architecture.md, "Runtime"): the seam between what to send (agent programs
walked live: ``AgentSource``; a replayed trace, timed or dependent: ``ReplaySource``; any later
source) and the one Dispatcher that sends it. A source is plain, picklable data until it is
started: ``split`` deals its sessions over workers (a session never spans two), and each part
travels to its worker whole. ``start`` binds it to a Dispatcher and returns a SourceRun: the
schedule of entries due at fixed times (the Dispatcher releases them), whose tasks then call
``Dispatcher.send`` for every request and may start further tasks (children after parents).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from swarm.runtime.context import Placement, SendLimits, TargetRun
    from swarm.runtime.dispatcher import Dispatcher, Scheduled


class SourceRun(Protocol):
    """A source bound to one Dispatcher."""

    @property
    def schedule(self) -> Sequence[Scheduled]:
        """Entries due at fixed times after the start, sorted by ``due_ns``."""
        ...

    def finish(self) -> None:
        """After the Dispatcher's run: account for what the stop left unfinished."""
        ...


class RequestSource(Protocol):
    #: "agents" or "replay": the manifest's kind of run
    kind: str
    #: limits the source carries (a workload's in-flight cap, request limit, duration)
    limits: SendLimits

    def session_count(self) -> int:
        """Sessions this source (or part) will start: agents, or replayed sessions."""
        ...

    def session_ids(self) -> Sequence[str]:
        """A name for each session, in the order they are dealt: an agent's trace
        ``session_id``; a replayed session's first request's ``session_id`` (``item<index>``
        when it has none; a session joined from several by dependencies is named by its first)."""
        ...

    def split(self, parts: int) -> Sequence[RequestSource]:
        """This source dealt over ``parts`` workers, each session on exactly one."""
        ...

    def shared_prefixes(self) -> Sequence[Sequence[object]]:
        """Token prefixes that sessions share by design (system prompts): a worker that runs
        only some sessions counts them as already sent, for the ideal reuse."""
        ...

    def start(self, d: Dispatcher, run: TargetRun, placement: Placement) -> SourceRun: ...
