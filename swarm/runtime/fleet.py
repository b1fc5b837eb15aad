"""A target that is a fleet: a router's URL and the replicas behind it, found and checked before a run.

Place in the map (docs/architecture.md, "Runtime"): called by ``runtime.targets`` when it
resolves a target. The replicas are the spec's (``--replica``), else the workers the router
lists (SGLang's router: ``GET /workers``, each worker's ``url``); a plain engine answers that
path 404 and stays a target of one server. Each replica is asked for its health
(``GET /health``) before anything is sent, and the name it answers with in ``X-Swarm-Replica``
kept (the trace's ``replica`` says that name; the report maps it to the URL): one that does not answer is an error naming it, or
with ``replicas_down: warn`` a warning and a run on the replicas alive. The requests go to the
router; the replicas are only scraped (``metrics_scraper``) and named in the manifest.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence

from swarm.clients.client import normalise_base_url, redact_url
from swarm.engines.emulated import REPLICA_HEADER
from swarm.errors import InputError

log = logging.getLogger(__name__)

#: where SGLang's router lists its workers (sglang-router 0.3: ``{"workers": [{"url": ...}]}``)
WORKERS_PATH = "/workers"
#: what a replica is asked before the run (every engine swarm knows answers it)
HEALTH_PATH = "/health"
#: seconds a replica or the router has to answer
ASK_TIMEOUT_S = 5.0


def _get(url: str, headers: Mapping[str, str]) -> tuple[int, bytes, str | None]:
    """(status, body, the ``X-Swarm-Replica`` header where the server names itself)."""
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=ASK_TIMEOUT_S) as resp:
            return int(resp.status), resp.read(), resp.headers.get(REPLICA_HEADER)
    except urllib.error.HTTPError as exc:
        return exc.code, b"", None


def listed_workers(router_url: str, headers: Mapping[str, str]) -> list[str] | None:
    """The worker URLs the router at ``router_url`` lists, or None where it lists none at that
    path (not a router: a plain engine answers 404)."""
    try:
        status, body, _ = _get(router_url.rstrip("/") + WORKERS_PATH, headers)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if status != 200:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    workers = data.get("workers") if isinstance(data, dict) else None
    if not isinstance(workers, list):
        return None
    return [normalise_base_url(str(w["url"])) for w in workers if isinstance(w, dict) and w.get("url")]


def _health(url: str, headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(why the replica at ``url`` is not serving, None when its health check answers 200; the
    name it gives itself in ``X-Swarm-Replica``, None where it gives none)."""
    try:
        status, _, name = _get(url.rstrip("/") + HEALTH_PATH, headers)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return (f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason), None
    return (None if status == 200 else f"{HEALTH_PATH} answered {status}"), name


def fleet_replicas(
    target: str, router_url: str, given: Sequence[str], on_down: str, headers: Mapping[str, str]
) -> dict[str, str]:
    """The replicas of ``target`` that answer, in order, each with the name it gives itself in
    ``X-Swarm-Replica`` (its record's ``replica``; "" where it gives none): ``given``, else what
    the router lists (empty for a target that is not a fleet). InputError where a router lists
    no workers, or where a replica is down and ``on_down`` is ``error``."""
    if given:
        replicas = [normalise_base_url(u) for u in given]
        source = "given"
    else:
        listed = listed_workers(router_url, headers)
        if listed is None:
            return {}
        if not listed:
            raise InputError(
                f"target {target}: the router at {redact_url(router_url)} lists no workers ({WORKERS_PATH}); "
                "start its replicas, or name them with --replica URL"
            )
        replicas, source = listed, "listed by the router"
    if len(set(replicas)) != len(replicas):
        raise InputError(f"target {target}: a replica is named twice: {', '.join(map(redact_url, replicas))}")
    answers = {u: _health(u, headers) for u in replicas}
    down = {u: reason for u, (reason, _) in answers.items() if reason is not None}
    if down:
        said = "; ".join(f"{redact_url(u)} ({r})" for u, r in down.items())
        if on_down != "warn" or len(down) == len(replicas):
            raise InputError(
                f"target {target}: {len(down)} of {len(replicas)} replicas ({source}) not answering: {said}"
                + ("" if len(down) == len(replicas) else "; --replicas-down warn runs on the others")
            )
        log.warning("target %s: %d of %d replicas not answering, run on the others: %s", target, len(down), len(replicas), said)
    return {u: name or "" for u, (reason, name) in answers.items() if reason is None}
