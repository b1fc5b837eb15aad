"""Where named agent profiles and topologies come from.

Place in the map (docs/architecture.md, "Parts"): ``agents/`` and ``topologies/`` hold data, shipped in
the wheel as package data (``swarm/_builtin/``) and read from the checkout in development. A
name resolves to ``<name>.yaml`` in the user's extra folders first, then the built-in ones; a
value that is a path to a ``.yaml`` file is loaded as it is.
"""

from __future__ import annotations

import functools
from pathlib import Path

from swarm.agent_profile import AgentProfile, load_profile
from swarm.errors import InputError
from swarm.topology import TopologyTemplate, load_topology


def builtin_dir(kind: str) -> Path:
    """The folder of built-in ``agents`` or ``topologies``."""
    here = Path(__file__).resolve().parent
    packaged = here / "_builtin" / kind
    if packaged.is_dir() and any(packaged.glob("*.yaml")):
        return packaged
    return here.parent / kind


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
        if self.agent_dirs or name not in self._profiles:  # (a preloaded catalog has no folders)
            path = self._find(name, self.agent_dirs, "agent profile")
            if self._stamps.get(("profile", name)) != (stamp := _stamp(path)) or name not in self._profiles:
                self._profiles[name] = load_profile(path)
                self._stamps[("profile", name)] = stamp
        return self._profiles[name]

    def topology(self, name: str) -> TopologyTemplate:
        if self.topology_dirs or name not in self._topologies:
            path = self._find(name, self.topology_dirs, "topology")
            if (
                self._stamps.get(("topology", name)) != (stamp := _stamp(path))
                or name not in self._topologies
            ):
                self._topologies[name] = load_topology(path)
                self._stamps[("topology", name)] = stamp
        return self._topologies[name]

    def topology_names(self) -> list[str]:
        return sorted({p.stem for d in self.topology_dirs if d.is_dir() for p in d.glob("*.yaml")})

    def profile_names(self) -> list[str]:
        return sorted({p.stem for d in self.agent_dirs if d.is_dir() for p in d.glob("*.yaml")})


@functools.lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    return Catalog()
