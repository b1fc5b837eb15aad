"""AgentSource: a workload's agents, their topologies walked live, as a request source.

Place in the map (docs/architecture.md, "Runtime"): the swarm's RequestSource. Agent *i* starts at
its arrival offset (the Workload's ArrivalProcess); the Dispatcher releases the starts, and
each agent (``agent.AgentRun``) then sends its nodes through ``Dispatcher.send`` as their
dependencies resolve. Sessions are agents: ``split`` deals them round-robin by agent id
(``workload.partition``), so a tree stays on one worker and the traffic is the same for any
number of workers. Pickled, a source is its spec, the profiles and topologies it uses and its
agent ids: a Ray worker rebuilds the identical Workload from them.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any

from swarm.runtime.agent import AgentEnv, AgentRun
from swarm.runtime.clocks import Placement
from swarm.runtime.dispatcher import Dispatcher, Outgoing, Scheduled
from swarm.runtime.retry import RetryPolicy
from swarm.runtime.sources import SendLimits, SourceContext
from swarm.workload.agent_profile import AgentProfile
from swarm.workload.catalog import Catalog
from swarm.workload.topology import TopologyTemplate
from swarm.workload.workload import Workload, WorkloadSpec, partition


def _rebuild(
    spec: WorkloadSpec,
    profiles: dict[str, AgentProfile],
    topologies: dict[str, TopologyTemplate],
    agent_ids: list[int],
    limits: SendLimits,
    retry: RetryPolicy,
    word_text_from: int,
) -> AgentSource:
    workload = Workload(spec, Catalog.preloaded(profiles, topologies), word_text_from=word_text_from)
    return AgentSource(workload, limits, retry, agent_ids)


class AgentSource:
    kind = "agents"

    def __init__(
        self,
        workload: Workload,
        limits: SendLimits | None = None,
        retry: RetryPolicy | None = None,
        agent_ids: Sequence[int] | None = None,
    ) -> None:
        self.workload = workload
        self.agent_ids = list(range(workload.n_agents)) if agent_ids is None else list(agent_ids)
        #: the run's limits (``SendSpec.limits``), or this part's share of them
        self.limits = limits or SendLimits()
        #: how agents retry a failed call (``SendSpec.retry``; off by default)
        self.retry = retry or RetryPolicy()

    def __reduce__(self) -> tuple[Any, ...]:
        profiles, topologies = self.workload.catalog.loaded()
        w = self.workload
        parts = (w.spec, profiles, topologies, self.agent_ids, self.limits, self.retry, w.word_text_from)
        return (_rebuild, parts)

    def session_count(self) -> int:
        return len(self.agent_ids)

    def session_ids(self) -> list[str]:
        return [self.workload.session_id(i) for i in self.agent_ids]

    def split(self, parts: int) -> list[AgentSource]:
        """Agents dealt round-robin by id, each part with its share of the limits (fewer parts
        than asked when the in-flight cap is smaller)."""
        parts = self.limits.usable_parts(parts)
        chosen = set(self.agent_ids)
        return [
            AgentSource(self.workload, limits, self.retry, [i for i in group if i in chosen])
            for group, limits in zip(
                partition(self.workload.n_agents, parts), self.limits.split(parts), strict=True
            )
        ]

    def shared_prefixes(self) -> list[list[object]]:
        return self.workload.shared_prefixes()

    def start(self, d: Dispatcher, run: SourceContext, placement: Placement) -> _AgentsRun:
        return _AgentsRun(self, d, run, placement)


class _AgentsRun:
    def __init__(self, source: AgentSource, d: Dispatcher, run: SourceContext, placement: Placement) -> None:
        spec = source.workload.spec
        self.workload = source.workload
        self.d = d
        self.env = AgentEnv(
            dispatcher=d,
            tokenizer=source.workload.tokenizer,
            context=spec.context,
            stream=spec.stream,
            run_id=run.run_id,
            target=d.client.target,
            engine=d.client.profile.name if d.client.profile is not None else "",
            worker=placement.worker,
            record_text=run.keep_text,
            retries=source.retry.retries,
            retry_backoff_s=source.retry.backoff_s,
            on_failure=spec.on_failure,
        )
        offsets = source.workload.start_offsets_s
        order = sorted(source.agent_ids, key=lambda i: (offsets[i], i))
        #: sessions prepared ahead by the Dispatcher's preparer: a mid-life one's history, a
        #: fresh one's first prompts
        self._prepared: dict[int, AgentRun] = {}
        #: the agents started (a fresh one may start before its optional preparation ends)
        self._started: set[int] = set()
        self.schedule = [self._entry(i, int(offsets[i] * 1e9)) for i in order]

    def _entry(self, agent_id: int, due_ns: int) -> Scheduled:
        """An agent's start, its first prompts built ahead, and a mid-life one's history,
        away from any release (100k tokens of history take a tenth of a second to build)."""
        mid = self.workload.starts_mid(agent_id)

        def prepare_steps() -> Iterator[None]:
            agent = AgentRun(self.workload.agent(agent_id), self.env)
            yield
            if mid:
                yield from agent.prepare_history_steps()
            else:
                yield from agent.prepare_root_steps()
            if agent_id in self._started:  # released meanwhile (its preparation is optional)
                agent.discard_ahead()
            else:
                self._prepared[agent_id] = agent

        return Scheduled(
            due_ns, self._starter(agent_id), prepare_steps=prepare_steps, prepares_request=False,
            prepare_optional=not mid,
        )  # fmt: skip

    def _starter(self, agent_id: int) -> Callable[[Outgoing | None, int], Coroutine[Any, Any, None]]:
        def start(_out: Outgoing | None, due_perf_ns: int) -> Coroutine[Any, Any, None]:
            """The session's start, at its release: the agent's own run is the task (no
            coroutine of this one held for each agent); counted started when it runs."""
            self._started.add(agent_id)
            agent = self._prepared.pop(agent_id, None) or AgentRun(self.workload.agent(agent_id), self.env)
            return agent.run(due_perf_ns, on_start=self.d.session_started, on_end=self._ended)

        return start

    def _ended(self, agent: AgentRun) -> None:
        self.d.session_ended(cut=agent.cut_short, session_id=agent.plan.session_id)

    def finish(self) -> None:
        return None
