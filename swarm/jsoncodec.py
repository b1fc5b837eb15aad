"""JSON in and out, as bytes: orjson, or the standard library where orjson is missing.

Place in the map (docs/architecture.md, "Shared value types"): the codec the clients and the
emulator both use (one wire format, one encoder), so neither imports the other for it.
"""

from __future__ import annotations

from typing import Any

try:  # orjson is a dependency; the fallback keeps a broken install usable
    import orjson

    def loads(data: bytes | str) -> Any:
        return orjson.loads(data)

    def dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

except ImportError:  # pragma: no cover
    import json

    def loads(data: bytes | str) -> Any:
        return json.loads(data)

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()
