"""A run's targets resolved: probed for what their spec leaves open, or the embedded emulators started.

Place in the map (docs/architecture.md, "Runtime"): the first step of the run frame
(``runtime.frame``). A target's URL is probed for its engine and model when the spec does not
name them; with no target, the emulator runs in both profiles on loopback, one child process
each, for as long as the run. Each target with a Prometheus endpoint gets a scraper.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence

from swarm.clients.client import normalise_base_url, read_api_key, redact_url
from swarm.engines.registry import check_dialect, get_engine
from swarm.errors import InputError
from swarm.runtime.context import ResolvedTarget
from swarm.runtime.fleet import fleet_replicas
from swarm.runtime.metrics_scraper import ServerMetricsScraper
from swarm.runtime.specs import TargetSpec

#: the engine profiles ``swarm run`` with no target starts the emulator in
EMBEDDED_ENGINES = ("sglang", "trtllm")


def resolve_target(spec: TargetSpec) -> ResolvedTarget:
    """Probe a target for what the spec leaves open (engine, model); InputError if unreachable."""
    from swarm.clients.probe import probe

    url = normalise_base_url(spec.url)
    result = asyncio.run(
        probe(
            url, engine=spec.engine, model=spec.model, api_key_env=spec.api_key_env,
            api_key_file=spec.api_key_file, send_requests=False,
        )
    )  # fmt: skip
    engine = spec.engine or result.engine
    if engine is None:
        raise InputError(
            f"target {spec.name}: cannot tell which engine serves {redact_url(url)}; pass --engine"
        )
    profile = get_engine(engine)
    dialect = check_dialect(profile, spec.dialect or profile.default_dialect)
    key = read_api_key(spec.api_key_env, spec.api_key_file)
    named = fleet_replicas(
        spec.name, url, spec.replicas, spec.replicas_down, {"Authorization": f"Bearer {key}"} if key else {}
    )
    return ResolvedTarget(
        name=spec.name,
        url=url,
        engine=engine,
        dialect=dialect,
        model=spec.model or result.model or "default",
        api_key_env=spec.api_key_env,
        api_key_file=spec.api_key_file,
        emulated=result.emulator,
        server_info={
            "version": result.server_version,
            "endpoints": result.endpoints,
            "metrics_path": result.metrics_path,
            "block_tokens": result.block_tokens,
        },
        replicas=tuple(named),
        replica_names={u: n for u, n in named.items() if n},
    )


def resolve_targets(specs: Sequence[TargetSpec]) -> list[ResolvedTarget]:
    """Every target resolved, in order; their names must differ (they name trace parts)."""
    names = [t.name for t in specs]
    if len(set(names)) != len(names):
        raise InputError(f"target names must differ: {names}")
    return [resolve_target(t) for t in specs]


#: what each embedded emulator is started with before ``--emulator-arg``'s: the twins serve as a
#: deployment for agents must. TensorRT-LLM refuses a prompt longer than ``max_num_tokens``
#: (8192) without chunked prefill, and agents' prompts run to 150k tokens (docs/emulator.md).
EMBEDDED_ARGS: dict[str, tuple[str, ...]] = {"trtllm": ("--enable-chunked-prefill",)}


@contextlib.contextmanager
def embedded_targets(extra_args: list[str]) -> Iterator[list[TargetSpec]]:
    """The emulator in both profiles, each its own process on a free loopback port."""
    from swarm.emulator.process import EmulatorProcess

    procs: list[EmulatorProcess] = []
    try:
        for engine in EMBEDDED_ENGINES:
            procs.append(EmulatorProcess(["--engine", engine, *EMBEDDED_ARGS.get(engine, ()), *extra_args]))
        yield [
            TargetSpec(name=f"emulator-{engine}", url=p.url, engine=engine)
            for engine, p in zip(EMBEDDED_ENGINES, procs, strict=True)
        ]
    finally:
        for p in procs:
            p.stop()


def scraper_for(target: ResolvedTarget, interval_s: float) -> ServerMetricsScraper | None:
    """A scraper of the target's Prometheus endpoint (its engine's path), if it has one; of a
    fleet, every replica's endpoint, each sample labelled with its replica (none for a simulated
    twin)."""
    path = get_engine(target.engine).metrics_path
    if not path or interval_s <= 0 or target.simulated:
        return None
    key = read_api_key(target.api_key_env, target.api_key_file)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return ServerMetricsScraper(
        target=target.name, engine=target.engine, url=target.url.rstrip("/") + path,
        interval_s=interval_s, headers=headers,
        replicas=tuple((redact_url(u), u.rstrip("/") + path) for u in target.replicas),
    )  # fmt: skip
