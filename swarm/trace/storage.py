"""Where a run's files live: a local folder, or any pyarrow filesystem URI (s3://, gs://, ...).

Place in the map (docs/architecture.md, "The trace"): under the TraceSink and the manifest. A run folder
is ``<output>/<run_id>``; ``<output>`` is a local path or a URI that
``pyarrow.fs.FileSystem.from_uri`` understands, so cluster workers can write their parts
straight to shared storage. Files are written under a temporary name and moved into place,
so readers see whole files only (on object stores a move is a copy, still all-or-nothing).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.fs as pafs

from swarm.errors import InputError


def is_uri(location: str) -> bool:
    return "://" in location


class RunStorage:
    """A run folder on some filesystem; paths given to methods are relative to it."""

    def __init__(self, fs: pafs.FileSystem, root: str, display: str | None = None) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.display = display or self.root

    @classmethod
    def at(cls, location: str | os.PathLike[str]) -> RunStorage:
        """The run folder at a local path or URI (``file:///...``, ``s3://bucket/runs/<id>``)."""
        text = str(location)
        if is_uri(text):
            try:
                fs, path = pafs.FileSystem.from_uri(text)
            except (ValueError, OSError) as exc:  # pyarrow.ArrowInvalid is a ValueError
                raise InputError(f"output {text!r}: not a usable filesystem URI: {exc}") from None
            return cls(fs, path, text)
        return cls(pafs.LocalFileSystem(), str(Path(text).absolute()), text)

    @property
    def local_path(self) -> Path | None:
        """The folder as a local Path, when the filesystem is the local one."""
        return Path(self.root) if isinstance(self.fs, pafs.LocalFileSystem) else None

    def path(self, rel: str = "") -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def makedirs(self, rel: str = "") -> None:
        self.fs.create_dir(self.path(rel), recursive=True)

    def exists(self, rel: str) -> bool:
        return bool(self.fs.get_file_info(self.path(rel)).type != pafs.FileType.NotFound)

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file atomically (temp name, then move)."""
        tmp = self.path(rel + ".tmp")
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        self.fs.move(tmp, self.path(rel))

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.path(rel)) as f:
            return bytes(f.read())

    def move(self, src_rel: str, dst_rel: str) -> None:
        self.fs.move(self.path(src_rel), self.path(dst_rel))

    def list(self, rel: str) -> list[str]:
        """Names of the files directly inside ``rel`` (empty if it does not exist)."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path(rel), allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)
