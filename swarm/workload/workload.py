"""The Workload: a pure function of (spec, seed) giving every agent and the text it sends.

Place in the map (docs/architecture.md, "Workload"): below the agent programs. It decides which agents
exist, their profile and topology, their start offsets, which shared system prompt each
carries, and the exact text of every prompt part that does not depend on an engine's output:
the system prompts, each agent's task, each node's instruction, tool results, and the
deterministic stand-in outputs used with ``context: synthetic``.

Everything is derived from string-seeded RNGs (``"<seed>:agent:<id>"``,
``"<seed>:agent:<id>:node:<name>"``), never from iteration order, so agent *i* is the same
whichever process builds it and whichever other agents it builds: any split of agents into
groups (workers) gives the same traffic.

Each node's instruction starts with a tag naming the node (``[t.0.2]``), so the prompts of
siblings differ from the first token after their parent's context.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from swarm.cliflag import flag
from swarm.errors import InputError
from swarm.fields import START_RATIOS_DEFAULT, StartAt, StartRatios, TokenizerPath
from swarm.texts import Text, WordText
from swarm.workload.agent_profile import AgentProfile
from swarm.workload.arrival import ArrivalSpec
from swarm.workload.catalog import Catalog, default_catalog
from swarm.workload.textsynth import WORD_TEXT_FROM_WORDS, corpus, synth_text, tool_catalogue
from swarm.workload.tokenizer import Tokenizer, WordTokenizer, counted_by_words
from swarm.workload.topology import TopologyTemplate

#: First word of every task text (so it is part of the prefix sessions share).
TASK_LEAD = "task"


#: the topology of a mix entry that names none, for a profile that has none of its own
DEFAULT_TOPOLOGY = "tree_of_thought"


class MixEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: str = Field(
        default="math_reasoner",
        description="agent profile name or YAML path (the showdown of swarm run and swarm sweep, with "
        "no spec, target or profile: tree_of_thought and claude_code)",
        json_schema_extra=flag("--profile", group="Workload"),
    )
    topology: str | None = Field(
        default=None,
        description="topology name or YAML path; none: the profile's own topologies (else "
        f"{DEFAULT_TOPOLOGY})",
        json_schema_extra=flag("--topology", group="Workload"),
    )
    weight: float = Field(default=1.0, gt=0, description="relative share of agents")
    start_at: Literal["begin", "mid"] | None = Field(
        default=None,
        description="this entry's agents start at their first call (begin) or mid-life (mid); the "
        "workload's start_at, when set, overrides it; none: begin",
    )


#: fields that moved from the workload to the sending settings (``RunSpec``): a spec file that
#: still has them under ``workload:`` is read as if they were at its top level
MOVED_TO_SENDING = ("max_in_flight", "duration_s", "max_requests", "retries", "retry_backoff_s")


class WorkloadSpec(BaseModel):
    """What traffic to generate. The same spec and seed give the same traffic."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(
        default=0, description="seed of every random choice", json_schema_extra=flag("--seed", group="Workload")
    )
    agents: int = Field(
        default=100,
        ge=1,
        le=10_000_000,
        description="agent sessions to run (the showdown, with no spec, target or profile: 20, sized "
        "for a 2-core machine running the emulator and the generator)",
        json_schema_extra=flag("--agents", group="Workload"),
    )
    mix: list[MixEntry] = Field(default_factory=lambda: [MixEntry()], min_length=1)
    system_prompts: int = Field(
        default=4,
        ge=1,
        le=100_000,
        description="distinct system prompts per profile, shared by the swarm (the showdown: 1)",
        json_schema_extra=flag("--system-prompts", group="Workload"),
    )
    context: Literal["synthetic", "live"] = Field(
        default="synthetic",
        description="synthetic: children see deterministic stand-ins of their parents' outputs "
        "(byte-identical prompts on every engine); live: the engine's real outputs",
        json_schema_extra=flag("--context", group="Workload"),
    )
    arrival: ArrivalSpec = Field(
        default_factory=ArrivalSpec,
        description="when agents start (the showdown: poisson:4; swarm sweep's: constant:8)",
        json_schema_extra=flag(
            "--arrival", group="Workload", parse="arrival", cli_type="str",
            help="when agents start: all_at_once | poisson:RATE | constant:RATE | gamma:RATE,CV | "
            "ramp:START,END,SECONDS (default poisson:10; the showdown: poisson:4; swarm sweep's: constant:8)",
        ),
    )  # fmt: skip
    stream: bool = Field(default=True, description="stream responses")
    on_failure: Literal["abort_branch", "standin"] = Field(
        default="abort_branch",
        description="when a call fails for good: abort_branch (the node and its descendants end), "
        "or standin (carry on with the node's stand-in output, so the tree keeps its shape)",
        json_schema_extra=flag("--on-failure", group="Workload"),
    )
    tokenizer: TokenizerPath = None
    start_at: StartAt = None
    start_ratios: StartRatios = START_RATIOS_DEFAULT


#: fields added after specs were first hashed: left out of ``traffic_hash`` at their defaults,
#: so a spec that does not use them hashes as it did before them
_HASHED_ONLY_WHEN_SET = {"start_at": None, "start_ratios": list(START_RATIOS_DEFAULT)}


def _digest(obj: object) -> str:
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class NodePlan:
    """What the Workload decides for one node of one agent."""

    node: str
    role: str
    depth: int
    branch: int
    instruction: Text
    max_tokens: int
    think_s: float
    tool_s: float
    tool_result: Text | None
    standin: Text
    score: float
    early_stop: bool
    task: Text | None = None  # a spawned sub-agent's own task (topology node ``spawn: true``)


@dataclass(slots=True)
class AgentPlan:
    agent_id: int
    session_id: str
    profile: AgentProfile
    topology: TopologyTemplate
    system_prompt_id: int
    system_prompt: Text
    task: Text
    start_s: float
    seed: int
    tokenizer: Tokenizer
    #: the system prompt of the agent's spawned sub-agents (the profile's
    #: ``subagent_system_prompt``); None: they carry the agent's own
    subagent_system_prompt: Text | None = None
    #: a synthesised text of this many words or more is a ``WordText`` (``textsynth.synth_text``)
    word_text_from: int = WORD_TEXT_FROM_WORDS
    #: a session started mid-life (``start_at: mid``): the nodes before its sampled start, in
    #: topological order; never sent, their turns in the prompts of what follows (empty: from
    #: its first call)
    history: tuple[str, ...] = ()
    _nodes: dict[str, NodePlan] = field(default_factory=dict, repr=False)
    #: compaction decisions, by node, taken when the node's prompt was first composed
    compacted: dict[str, bool] = field(default_factory=dict, repr=False)
    _token_counts: dict[Text, int] = field(default_factory=dict, repr=False)
    #: token counts of outputs less their reasoning, by output (``prompts.decide_compaction``)
    visible_token_counts: dict[Text, int] = field(default_factory=dict, repr=False)
    _summaries: dict[str, Text] = field(default_factory=dict, repr=False)
    #: the last node ``prompts.decide_compaction`` decided from its whole ancestry, and the
    #: tokens of the turns from the latest compaction through its own (reasoning stripped as
    #: from a turn that is not a direct parent's): what its one child's decision starts from
    #: (None after a fresh-context node: its prompt's history is not its children's)
    compaction_window: tuple[str, int] | None = field(default=None, repr=False)

    def token_count(self, text: Text) -> int:
        """Tokens of ``text`` by the plan's tokenizer (memoised: prompt parts recur; a
        ``WordText``'s count under word tokens is its ``words``, not kept: a simulated session's
        memo of them was 1.2 KB an agent)."""
        if type(text) is WordText and counted_by_words(text, self.tokenizer):
            return text.words
        n = self._token_counts.get(text)
        if n is None:
            n = self._token_counts[text] = self.tokenizer.count(text)
        return n

    def text(self, rng: random.Random, n_tokens: int, lead: str = "") -> Text:
        """A synthesised text of the agent's (``textsynth.synth_text``, its tokenizer and
        ``word_text_from``)."""
        return synth_text(rng, n_tokens, self.tokenizer, lead=lead, word_text_from=self.word_text_from)

    def summary(self, node: str) -> Text:
        """The summary that replaces the history when ``node``'s prompt is compacted: its own
        RNG stream, so nodes keep their other samples."""
        text = self._summaries.get(node)
        if text is None:  # every later prompt carries it: made once
            compaction = self.profile.compaction
            assert compaction is not None
            rng = random.Random(f"{self.seed}:agent:{self.agent_id}:node:{node}:summary")
            tokens = max(3, compaction.summary_tokens.sample_int(rng, 3))
            text = self.text(rng, tokens, lead=f"summary {self.agent_id} {node} :")
            self._summaries[node] = text
        return text

    def has_node(self, name: str) -> bool:
        """Whether the plan of ``name`` is built."""
        return name in self._nodes

    def node(self, name: str) -> NodePlan:
        """The plan of one node (built on first use; a pure function of seed, agent and node)."""
        plan = self._nodes.get(name)
        if plan is None:
            plan = self._nodes[name] = self._build_node(name)
        return plan

    def _build_node(self, name: str) -> NodePlan:
        rng = random.Random(f"{self.seed}:agent:{self.agent_id}:node:{name}")
        attrs = self.topology.graph.nodes[name]
        role = str(attrs["role"])
        prof = self.profile
        instruction = self.text(rng, max(2, prof.instruction_tokens.sample_int(rng, 2)), lead=f"[{name}]")
        max_tokens = prof.output_for(role).sample_int(rng, 1)
        think = prof.think_time_s.sample(rng)
        tool_after = bool(attrs.get("tool_after"))
        tool_s = prof.tool_time_s.sample(rng) if tool_after else 0.0
        tool_result = (
            self.text(rng, max(3, prof.tool_result_tokens.sample_int(rng, 3)), lead="tool result :")
            if tool_after
            else None
        )
        standin = self.text(rng, max_tokens)
        score = rng.random()
        early_stop = rng.random() < prof.pruning.early_stop_p
        task = None
        if attrs.get("spawn"):  # drawn last: nodes without it keep their samples
            n_task = max(2, prof.task_tokens.sample_int(rng, 2))
            task = self.text(rng, n_task, lead=f"task {self.agent_id} {name} :")
        return NodePlan(
            node=name,
            role=role,
            depth=int(attrs.get("depth", 0)),
            branch=int(attrs.get("branch", 0)),
            instruction=instruction,
            max_tokens=max_tokens,
            think_s=think,
            tool_s=tool_s,
            tool_result=tool_result,
            standin=standin,
            score=score,
            early_stop=early_stop,
            task=task,
        )


class Workload:
    """The agents of a spec. ``agent(i)`` is a pure function of (spec, seed, i)."""

    def __init__(
        self,
        spec: WorkloadSpec,
        catalog: Catalog | None = None,
        tokenizer: Tokenizer | None = None,
        word_text_from: int = WORD_TEXT_FROM_WORDS,
    ) -> None:
        """``word_text_from``: a synthesised text of this many words or more is a ``WordText``
        (``textsynth.synth_text``; ``SIMULATED_WORD_TEXT_FROM_WORDS`` on a virtual clock, the
        same texts held in fewer bytes)."""
        from swarm.workload.tokenizer import get_tokenizer

        self.spec = spec
        self.word_text_from = word_text_from
        self.catalog = catalog or default_catalog()
        self.tokenizer = tokenizer or get_tokenizer(spec.tokenizer)
        self.profiles = [self.catalog.profile(m.profile) for m in spec.mix]
        #: per mix entry, its topologies and their cumulative weights (one, unless the entry
        #: names none and its profile has several of its own)
        self.topology_choices = [self._choices(m, p) for m, p in zip(spec.mix, self.profiles, strict=True)]
        self.topologies = [t for templates, _ in self.topology_choices for t in templates]
        weights = np.array([m.weight for m in spec.mix], dtype=float)
        self._cum_weights = np.cumsum(weights / weights.sum())
        rng = np.random.default_rng(np.random.SeedSequence([spec.seed, 0xA441]))
        self.start_offsets_s = spec.arrival.offsets(spec.agents, rng)
        self._system_prompts: dict[tuple[str, int], Text] = {}
        self._system_prompt_counts: dict[Text, int] = {}
        #: whether any mix entry's agents may start mid-life (``starts_mid``)
        self._some_start_mid = any(self._start_at(i) == "mid" for i in range(len(spec.mix)))
        if isinstance(self.tokenizer, WordTokenizer):
            corpus()  # made now, before any send: not a stall in the loop at the first long text

    def _choices(self, entry: MixEntry, profile: AgentProfile) -> tuple[list[TopologyTemplate], list[float]]:
        if entry.topology is not None or not profile.topologies:
            return [self.catalog.topology(entry.topology or DEFAULT_TOPOLOGY)], [1.0]
        base = Path(profile.base_dir or ".")
        names = [
            str(base / c.name) if c.name.endswith((".yaml", ".yml")) else c.name for c in profile.topologies
        ]
        weights = np.cumsum([c.weight for c in profile.topologies])
        return [self.catalog.topology(n) for n in names], list(weights / weights[-1])

    @property
    def n_agents(self) -> int:
        return self.spec.agents

    def content_digests(self) -> dict[str, str]:
        """A digest of each resolved agent profile and topology the mix uses, by
        ``"profile NAME"`` / ``"topology NAME"``: their contents (every field, the system prompt
        file's text, the topology's nodes, edges and beams), not their names."""
        out: dict[str, str] = {}
        for p in self.profiles:
            out[f"profile {p.name}"] = _digest(
                {**p.digest_fields(), "system_prompt_text": p.system_prompt_text}
            )
        for t in self.topologies:
            out[f"topology {t.name}"] = _digest(t.canonical())
        return out

    def traffic_hash(self) -> str:
        """Hash of everything that shapes the traffic: the spec and the resolved contents of
        its profiles and topologies. Two runs with equal hashes send the same requests; an edit
        to ``agents/*.yaml`` between them changes it. A mix entry given as a file path counts by
        its file name (its contents are in the digests), so the same spec run from two folders
        hashes alike."""
        spec = self.spec.model_dump(mode="json")
        for key, default in _HASHED_ONLY_WHEN_SET.items():
            if spec.get(key) == default:
                del spec[key]
        for entry in spec["mix"]:
            if entry.get("start_at") is None:
                entry.pop("start_at", None)
            for key in ("profile", "topology"):
                if str(entry[key]).endswith((".yaml", ".yml")):
                    entry[key] = Path(entry[key]).name
        return _digest({"spec": spec, "contents": self.content_digests()})

    def _text(self, rng: random.Random, n_tokens: int, lead: str) -> Text:
        """A synthesised text of the workload's (its tokenizer and ``word_text_from``)."""
        return synth_text(rng, n_tokens, self.tokenizer, lead=lead, word_text_from=self.word_text_from)

    def system_prompt(self, profile: AgentProfile, index: int, subagent: bool = False) -> Text:
        """System prompt ``index`` of ``profile``'s pool (starts with its own tag), or with
        ``subagent`` of its sub-agents' pool (``subagent_system_prompt``)."""
        key = (profile.name + (":subagent" if subagent else ""), index)
        text = self._system_prompts.get(key)
        if text is None:
            sp = profile.system_prompt
            lead = f"[system {profile.name} {index}]"
            rng = random.Random(f"{self.spec.seed}:system:{profile.name}:{index}")
            if subagent:
                assert profile.subagent_system_prompt is not None
                sp = profile.subagent_system_prompt
                lead = f"[subagent system {profile.name} {index}]"
                rng = random.Random(f"{self.spec.seed}:subagent-system:{profile.name}:{index}")
            if profile.system_prompt_text is not None and not subagent:
                text = f"{lead} {profile.system_prompt_text}"
            elif sp.style == "tool_catalogue":
                text = tool_catalogue(rng, sp.tokens, sp.tools, self.tokenizer, lead=lead)
            else:
                text = self._text(rng, sp.tokens, lead)
            self._system_prompts[key] = text
        return text

    def shared_prefixes(self) -> list[list[object]]:
        """Token prefixes that sessions share with each other: each system prompt of the pool
        followed by the first word of every task. A cluster worker seeds its PrefixIndex with
        them, so prefixes first sent by another worker still count towards the ideal."""
        out: list[list[object]] = []
        for profile in {p.name: p for p in self.profiles}.values():
            pools = [False, True] if profile.subagent_system_prompt is not None else [False]
            for k in range(self.spec.system_prompts):
                for subagent in pools:
                    out.append(
                        [
                            *self.tokenizer.encode(self.system_prompt(profile, k, subagent)),
                            *self.tokenizer.encode(TASK_LEAD),
                        ]
                    )
        return out

    def session_id(self, agent_id: int) -> str:
        """The trace's ``session_id`` of agent ``agent_id``."""
        return f"{self.spec.seed}-{agent_id}"

    def _mix_and_topology(self, agent_id: int, rng: random.Random) -> tuple[int, TopologyTemplate]:
        """An agent's mix entry (the first draw of its stream) and topology (a stream of its
        own: agents of one-topology entries keep theirs)."""
        mix = int(np.searchsorted(self._cum_weights, rng.random(), side="right"))
        mix = min(mix, len(self.profiles) - 1)
        templates, cum = self.topology_choices[mix]
        topology = templates[0]
        if len(templates) > 1:
            pick = random.Random(f"{self.spec.seed}:agent:{agent_id}:topology").random()
            topology = templates[min(int(np.searchsorted(cum, pick, side="right")), len(templates) - 1)]
        return mix, topology

    def starts_mid(self, agent_id: int) -> bool:
        """Whether agent ``agent_id`` starts mid-life (its plan's ``history`` is not empty),
        told without building its plan."""
        if not self._some_start_mid:  # no draw needed (a seeded RNG an agent, 2 % of a short run's CPU)
            return False
        mix, topology = self._mix_and_topology(agent_id, random.Random(f"{self.spec.seed}:agent:{agent_id}"))
        return bool(self._history(agent_id, topology, self._start_at(mix)))

    def agent(self, agent_id: int) -> AgentPlan:
        if not 0 <= agent_id < self.spec.agents:
            raise IndexError(agent_id)
        rng = random.Random(f"{self.spec.seed}:agent:{agent_id}")
        mix, topology = self._mix_and_topology(agent_id, rng)
        profile = self.profiles[mix]
        sp_id = rng.randrange(self.spec.system_prompts)
        task = self._text(rng, max(2, profile.task_tokens.sample_int(rng, 2)), f"task {agent_id} :")
        system = self.system_prompt(profile, sp_id)
        subagent = self.system_prompt(profile, sp_id, subagent=True) if profile.subagent_system_prompt is not None else None
        return AgentPlan(
            agent_id=agent_id,
            session_id=self.session_id(agent_id),
            profile=profile,
            topology=topology,
            system_prompt_id=sp_id,
            system_prompt=system,
            task=task,
            start_s=float(self.start_offsets_s[agent_id]),
            seed=self.spec.seed,
            tokenizer=self.tokenizer,
            subagent_system_prompt=subagent,
            word_text_from=self.word_text_from,
            history=self._history(agent_id, topology, self._start_at(mix)),
            _token_counts={
                p: self._system_prompt_count(p)
                for p in (system, subagent)
                if p is not None and self._memo_counts(p)
            },
        )

    def _memo_counts(self, text: Text) -> bool:
        """Whether a plan's memo of token counts would read ``text``'s (``AgentPlan.token_count``
        counts a ``WordText`` under word tokens from its words)."""
        return not counted_by_words(text, self.tokenizer)

    def _system_prompt_count(self, text: Text) -> int:
        """A system prompt's tokens, counted once for the swarm: each plan counted its own (a
        dozen passes over thousands of words an agent, 3 % of a 10,000-agent simulation)."""
        n = self._system_prompt_counts.get(text)
        if n is None:
            n = self._system_prompt_counts[text] = self.tokenizer.count(text)
        return n

    def _start_at(self, mix: int) -> str:
        """Where agents of mix entry ``mix`` start: the workload's ``start_at`` when set, else the
        entry's, else ``begin``."""
        return self.spec.start_at or self.spec.mix[mix].start_at or "begin"

    def _history(self, agent_id: int, topology: TopologyTemplate, start_at: str) -> tuple[str, ...]:
        """With ``start_at: mid``, the nodes an agent starts past: the first ``k`` of its
        topological order, ``k`` the share drawn uniformly between ``start_ratios`` of its calls
        (rounded down; a one-call topology starts at its call). A topology with beam groups
        starts whole: a beam's keep-or-cut needs its candidates' and scorers' calls, and a
        history cannot have made them. Its own RNG stream."""
        if start_at != "mid" or len(topology.order) < 2 or topology.beams:
            return ()
        low, high = self.spec.start_ratios
        share = random.Random(f"{self.spec.seed}:agent:{agent_id}:start").uniform(low, high)
        return tuple(topology.order[: int(share * len(topology.order))])


def check_mix(spec: WorkloadSpec, catalog: Catalog | None = None, source: str = "run spec") -> None:
    """Resolve every profile and topology of the mix; an InputError names where each bad one
    was given (``SOURCE: workload.mix.I.FIELD``, or the flag when it came from flags)."""
    catalog = catalog or default_catalog()
    for i, entry in enumerate(spec.mix):
        for name, lookup in (("profile", catalog.profile), ("topology", catalog.topology)):
            value = getattr(entry, name)
            try:
                if value is None:  # the profile's own topologies
                    Workload(spec.model_copy(update={"mix": [entry], "agents": 1}), catalog)
                else:
                    lookup(value)
            except InputError as exc:
                where = f"--{name}" if source == "flags" else f"{source}: workload.mix.{i}.{name}"
                raise InputError(f"{where}: {exc}") from None


def partition(n_agents: int, workers: int) -> list[list[int]]:
    """Agents split across workers by session (agent id), deterministically, round-robin."""
    return [list(range(w, n_agents, workers)) for w in range(workers)]
