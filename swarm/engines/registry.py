"""Every engine swarm knows, in the order the probe tries to recognise them.

Place in the map (docs/architecture.md, "Engines"): adding an engine is one module beside this
one (filling an ``Engine``) and its name here.
"""

from __future__ import annotations

from swarm.engines import llamacpp, sglang, trtllm, vllm
from swarm.engines.engine import DIALECTS, Engine
from swarm.errors import InputError

#: vLLM first: in development mode it also serves SGLang's ``/server_info``
ENGINES: dict[str, Engine] = {e.name: e for e in (vllm.ENGINE, sglang.ENGINE, llamacpp.ENGINE, trtllm.ENGINE)}
#: a server that answers ``/version`` and shows no other engine's signs
FALLBACK_ENGINE = "vllm"


def get_engine(name: str) -> Engine:
    """The engine called ``name``, or an InputError listing the known ones."""
    try:
        return ENGINES[name]
    except KeyError:
        known = ", ".join(sorted(ENGINES))
        raise InputError(f"unknown engine profile {name!r} (known: {known})") from None


def check_dialect(engine: Engine, dialect: str) -> str:
    """``dialect`` if the engine speaks it, else an InputError."""
    if dialect not in DIALECTS:
        raise InputError(f"unknown dialect {dialect!r} (known: {', '.join(DIALECTS)})")
    if dialect not in engine.dialects:
        raise InputError(
            f"{engine.title} does not serve the {dialect} dialect (it serves: {', '.join(engine.dialects)})"
        )
    return dialect


def engine_by_owner(owned_by: str | None) -> str | None:
    """The engine whose ``/v1/models`` ``owned_by`` is ``owned_by``."""
    if not owned_by:
        return None
    return next((e.name for e in ENGINES.values() if owned_by.lower() in e.owned_by), None)
