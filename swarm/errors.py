"""Errors a user can act on.

Place in the map (docs/architecture.md, "Shared value types"): shared by every part. An ``InputError`` is bad input from the
user (a flag, a spec file, a URL, a port): the CLI prints its message as one line and exits 2,
without a traceback. Everything else is a bug or an environment failure and keeps its cause.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad input from the user; the message names the file, field, flag or value at fault."""
