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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from swarm.runtime.clocks import Placement
    from swarm.runtime.dispatcher import Dispatcher, Scheduled


@dataclass(frozen=True)
class SendLimits:
    """Limits on one target's sending that a source carries with it (a workload's spec, or
    the replay's flags). They hold for the whole target: a source split over workers gives
    each part its share (``split``)."""

    #: requests in flight at once; 0: no cap
    max_in_flight: int = 0
    #: requests sent at most
    max_requests: int | None = None
    #: no request is sent later than this after the start, seconds
    duration_s: float | None = None

    def usable_parts(self, parts: int) -> int:
        """How many parts the limits can be shared by: an in-flight cap of C cannot be split
        over more than C workers (each needs a slot)."""
        return max(1, min(parts, self.max_in_flight) if self.max_in_flight > 0 else parts)

    def split(self, parts: int) -> list[SendLimits]:
        """Each of ``parts`` parts' share: the caps divided as evenly as whole numbers allow."""
        return [
            SendLimits(
                max_in_flight=share(self.max_in_flight, parts, i) if self.max_in_flight > 0 else 0,
                max_requests=None if self.max_requests is None else share(self.max_requests, parts, i),
                duration_s=self.duration_s,
            )
            for i in range(parts)
        ]


def share(total: int, parts: int, i: int) -> int:
    """Part ``i``'s share of ``total`` over ``parts`` parts (the first ones get the remainder)."""
    return total // parts + (1 if i < total % parts else 0)


class SourceContext(Protocol):
    """What a source reads of the target run it is started in (a ``TargetRun``)."""

    run_id: str
    #: prompts and outputs go to the trace
    keep_text: bool


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

    def start(self, d: Dispatcher, run: SourceContext, placement: Placement) -> SourceRun: ...
