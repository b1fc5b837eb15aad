"""The 17 shared Claude Code sessions (tests/data/weka-claude-code, gzipped), unpacked for a test.

Source and licence: tests/data/README.md ("weka-claude-code/").
"""

from __future__ import annotations

import gzip
from pathlib import Path

DATA = Path(__file__).parent / "data" / "weka-claude-code"
#: every session, by file name (trace_0002.json ...), in name order
SESSIONS = sorted(p.name.removesuffix(".gz") for p in DATA.glob("trace_*.json.gz"))


def unpack(folder: Path, names: list[str] | None = None) -> Path:
    """Write the sessions ``names`` (default: all) as plain JSON files into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names if names is not None else SESSIONS:
        (folder / name).write_bytes(gzip.decompress((DATA / f"{name}.gz").read_bytes()))
    return folder
