"""The README's first command, ``swarm run`` with no flags, held to what its figures claim.

One fresh ``swarm run --json`` (both emulator profiles, a local Ray) in a temporary folder,
timed whole; then, from its trace and the emulators' scraped metrics, per target:

- late sends: requests whose dispatch lag (sent minus due, less any wait for the in-flight
  cap) passed 10 ms, and the lag's p99: the run's own warning fires when the p99 passes 10 ms;
- emulated ITL vs the model: the client's mean inter-token latency over the emulator's
  modelled one (``swarm_emulator_step_token_model_seconds_total / ..._step_tokens_total``:
  per token after a request's first, the modelled time since its previous token, averaged
  over tokens, so a prefill step that pauses the streams counts as a client sees it); 1.0 is
  an emulator that kept its model and a client that saw it;
- the emulator's step overrun: its steps' actual over modelled time.

Targets (issue 14, section 2): under 120 s on a 2-core machine, no late-send warning, ITL
within 20 % of the model; issue 27: dispatch lag p99 at most 3 ms. A row says met only when the run completed with every request ok
and every Ray worker lived. (The default is the showdown since issue 26: it measures a window
of each target, so the two targets' request counts may differ by the calls in flight at its
end.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.common import Row

WALL_TARGET_S = 120.0
ITL_TOLERANCE = 0.2
LATE_MS = 10.0
#: issue 27: the default run's dispatch lag p99 at most this on a 2-core machine
LAG_P99_TARGET_MS = 3.0


def measure(args: list[str] | None = None) -> dict[str, Any]:
    """Run ``swarm run --json [args]`` and return its figures (see the module docstring)."""
    import numpy as np

    from swarm.analysis import metrics as m
    from swarm.analysis.report import build_report, load_run

    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "swarm", "run", "--json", "--no-progress", *(args or [])],
            cwd=tmp, capture_output=True, text=True, timeout=1800,
            env={**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")},
        )  # fmt: skip
        wall_s = time.monotonic() - started
        if out.returncode not in (0, 1, 3):
            raise RuntimeError(f"swarm run failed ({out.returncode}): {out.stderr[-2000:]}")
        summary = json.loads(out.stdout)
        run = load_run(os.path.join(tmp, summary["run_dir"]))
        report = build_report(run)
        targets: dict[str, dict[str, Any]] = {}
        for name, entry in report["targets"].items():
            rows = run.rows_of(name)
            lag = m.lag_ms(rows)
            emu = (entry["server"] or {}).get("emulator") or {}
            itl_mean = entry["figures"]["itl_ms"]["mean"]
            model_itl = emu.get("model_itl_ms")
            targets[name] = {
                "requests": entry["figures"]["requests"],
                "ok": entry["figures"]["ok"],
                "late": int(np.sum(lag > LATE_MS)),
                "lag_p50_ms": float(np.percentile(lag, 50)) if lag.size else None,
                "lag_p99_ms": float(np.percentile(lag, 99)) if lag.size else None,
                "lag_max_ms": float(lag.max()) if lag.size else None,
                "itl_mean_ms": itl_mean,
                "model_itl_ms": model_itl,
                "itl_vs_model": itl_mean / model_itl if itl_mean and model_itl else None,
                "step_overrun": emu.get("step_overrun"),
            }
        workers_alive = all(w.alive for w in run.manifest.workers)
        return {
            "wall_s": wall_s,
            "status": run.manifest.status.value,
            "warnings": report["warnings"],
            "workers_alive": workers_alive,
            "targets": targets,
            "stderr_warnings": [line for line in out.stderr.splitlines() if "could not keep" in line],
        }


def run(args: list[str] | None = None) -> list[Row]:
    res = measure(args)
    valid = (
        res["status"] == "complete"
        and res["workers_alive"]
        and len(res["targets"]) == 2
        and all(t["ok"] == t["requests"] > 0 for t in res["targets"].values())
    )
    why = "" if valid else " (INVALID: not every request ok, or a worker died)"
    rows = [
        Row(
            "default run: wall time" + why,
            res["wall_s"],
            "s",
            target=f"< {WALL_TARGET_S:g} s",
            met=valid and res["wall_s"] < WALL_TARGET_S,
        )
    ]
    for name, t in res["targets"].items():
        tag = f"default run, {name}"
        rows.append(Row(f"{tag}: requests (ok)", t["ok"], "requests"))
        rows.append(Row(f"{tag}: dispatch lag p50", t["lag_p50_ms"], "ms"))
        rows.append(
            Row(
                f"{tag}: dispatch lag p99",
                t["lag_p99_ms"],
                "ms",
                target=f"<= {LAG_P99_TARGET_MS:g} ms (issue 27; the warning is at {LATE_MS:g})",
                met=valid and t["lag_p99_ms"] is not None and t["lag_p99_ms"] <= LAG_P99_TARGET_MS,
            )
        )
        rows.append(Row(f"{tag}: dispatch lag max", t["lag_max_ms"], "ms"))
        rows.append(Row(f"{tag}: sends > {LATE_MS:g} ms late", t["late"], "requests"))
        ratio = t["itl_vs_model"]
        rows.append(
            Row(
                f"{tag}: ITL mean vs the model's",
                t["itl_mean_ms"],
                "ms",
                baseline=t["model_itl_ms"],
                ratio=ratio,
                target=f"ratio within {ITL_TOLERANCE:.0%}",
                met=valid and ratio is not None and abs(ratio - 1) <= ITL_TOLERANCE,
            )
        )
        rows.append(Row(f"{tag}: emulator step overrun", t["step_overrun"], "x model"))
    return rows


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1:]), indent=2))
