"""Secrets kept out of everything swarm writes: traces, manifests, logs, error texts.

Place in the map (docs/architecture.md, "Clients"): used by whatever reads an API key (``clients.client``'s
``read_api_key``, a Ray worker handed one) and by whatever turns foreign text into a record
(the client's error texts, which may echo request headers). A key is registered once it is
read; ``redact`` replaces every registered key in a text; and a log-record factory redacts
every log message and traceback of the process before any handler sees it, so a key cannot
reach a log file through a library's message either.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

REDACTED = "[REDACTED]"
#: Shorter strings are not treated as secrets (redacting "a" everywhere would garble logs).
MIN_SECRET_CHARS = 6

_secrets: set[str] = set()
_lock = threading.Lock()
_installed = False


def register_secret(value: str | None) -> None:
    """Treat ``value`` as a secret from now on (in this process)."""
    if not value or len(value) < MIN_SECRET_CHARS:
        return
    with _lock:
        _secrets.add(value)
        _install_log_redaction()


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``[REDACTED]``."""
    if not _secrets:
        return text
    for secret in tuple(_secrets):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _install_log_redaction() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad format string: keep what there is
            message = str(record.msg)
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[0] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact(text)
            record.exc_info = None
        return record

    logging.setLogRecordFactory(factory)
