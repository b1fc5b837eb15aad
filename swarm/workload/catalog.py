"""Where named agent profiles and topologies come from.

Place in the map (docs/architecture.md, "Workload"): ``agents/`` and ``topologies/`` hold data, shipped in
the wheel as package data (``swarm/_builtin/``) and read from the checkout in development. A
name resolves to ``<name>.yaml`` in the user's extra folders first, then the built-in ones; a
value that is a path to a ``.yaml`` file is loaded as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from swarm.errors import InputError
from swarm.workload.agent_profile import AgentProfile, load_profile
from swarm.workload.topology import TopologyTemplate, load_topology


def builtin_dir(kind: str) -> Path:
    """The folder of built-in ``agents``, ``topologies`` or ``figures``."""
    package = Path(__file__).resolve().parents[1]  # swarm/
    packaged = package / "_builtin" / kind
    if packaged.is_dir() and any(packaged.glob("*.yaml")):
        return packaged
    return package.parent / kind  # a checkout: the repo's own folder


T = TypeVar("T")


def _stamp(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns


class Catalog:
    def __init__(self, agent_dirs: list[Path] | None = None, topology_dirs: list[Path] | None = None) -> None:
        self.agent_dirs = [*(agent_dirs or []), builtin_dir("agents")]
        self.topology_dirs = [*(topology_dirs or []), builtin_dir("topologies")]
        self._profiles: dict[str, AgentProfile] = {}
        self._topologies: dict[str, TopologyTemplate] = {}
        #: (kind, name) -> the file's path, size and mtime when loaded: an edited file is read again
        self._stamps: dict[tuple[str, str], tuple[str, int, int]] = {}

    @classmethod
    def preloaded(cls, profiles: dict[str, AgentProfile], topologies: dict[str, TopologyTemplate]) -> Catalog:
        """A catalog that answers from already-loaded items only (on a cluster worker)."""
        catalog = cls(agent_dirs=[], topology_dirs=[])
        catalog.agent_dirs, catalog.topology_dirs = [], []
        catalog._profiles = dict(profiles)
        catalog._topologies = dict(topologies)
        return catalog

    def loaded(self) -> tuple[dict[str, AgentProfile], dict[str, TopologyTemplate]]:
        """What has been loaded so far, by the names it was asked for."""
        return dict(self._profiles), dict(self._topologies)

    def _find(self, name: str, dirs: list[Path], kind: str) -> Path:
        if name.endswith((".yaml", ".yml")):
            p = Path(name)
            if not p.is_file():
                raise InputError(f"{name}: no such {kind} file")
            return p
        for d in dirs:
            p = d / f"{name}.yaml"
            if p.is_file():
                return p
        known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.yaml")})
        raise InputError(f"unknown {kind} {name!r} (known: {', '.join(known) or 'none'})")

    def profile(self, name: str) -> AgentProfile:
        return self._get(name, "agent profile", self.agent_dirs, self._profiles, load_profile)

    def topology(self, name: str) -> TopologyTemplate:
        return self._get(name, "topology", self.topology_dirs, self._topologies, load_topology)

    def _get(
        self, name: str, kind: str, dirs: list[Path], loaded: dict[str, T], load: Callable[[Path], T]
    ) -> T:
        """``name`` from ``loaded``, read again when its file changed since (a preloaded catalog,
        on a cluster worker, has no folders and answers from what it was given)."""
        if dirs or name not in loaded:
            path = self._find(name, dirs, kind)
            stamp = _stamp(path)
            if name not in loaded or self._stamps.get((kind, name)) != stamp:
                loaded[name] = load(path)
                self._stamps[(kind, name)] = stamp
        return loaded[name]

    def topology_names(self) -> list[str]:
        return sorted({p.stem for d in self.topology_dirs if d.is_dir() for p in d.glob("*.yaml")})

    def profile_names(self) -> list[str]:
        return sorted({p.stem for d in self.agent_dirs if d.is_dir() for p in d.glob("*.yaml")})


@functools.lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    return Catalog()
