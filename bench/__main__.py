"""``python -m bench [CASE ...] [--json] [--quick]`` runs the benchmark cases and prints one table.

Cases (default: all but router, ray-scale, cluster, sim-fleet and simulate-100k, about 8-9
minutes on a 2-core machine):

- ``path``: streamed chunks/s through swarm's full path vs a bare aiohttp loop (ratio)
- ``client-delay``: receive time minus the emulator's send stamp, TTFT and ITL, 500 / 2,000 /
  10,000 agents
- ``scale``: 10,000 agents on one Ray worker: requests/s, chunks/s, memory per agent
- ``ingest``: records/s the driver receives and writes, and how many workers that serves
- ``sink-stall``: how late a 1 ms ticker wakes on a loop that writes 10,000 records/s to the
  trace, beside the same loop without a sink
- ``arrival``: p99 lateness of sends on a Poisson schedule at the highest sustained rate
- ``replay-timing``: timed replay's gap error and lateness (Poisson and Mooncake traces)
- ``ray-scale``: 500 / 2,000 / 10,000 agents over 1 and 2 Ray workers (long; not in the default)
- ``cluster``: 1, 2, 4, 8 workers on a loopback multi-node Ray: requests/s, driver and worker
  CPU per 1,000 records, the sizing figures (not in the default)
- ``default-run``: the README's ``swarm run``: wall time, late sends, emulated ITL vs the model
- ``h1-parse``: CPU per streamed response, the client's HTTP/1.1 exchange (httptools, llhttp)
  vs the previous hand-written parser (kept in the case as the baseline)
- ``simulate``: ``swarm simulate`` of the emulated showdown (200, 1,000 and 10,000 agents, one
  twin and fleets of 8 and 64; every agent started, evenly over the window): simulated seconds
  per wall second, agents started, clock events and requests per wall second, peak memory
- ``simulate-100k``: issue 30's second target as stated: 100,000 agents on a fleet of 64 for
  10 simulated minutes, given 5 minutes of wall time: the simulated seconds reached, the speed,
  the peak memory (not in the default: 5 minutes)
- ``sim-fleet``: a three-replica fleet sweep in real time (``swarm emulate --replicas 3`` behind
  SGLang's router) and simulated: per point, the simulated figures' error (not in the default:
  needs the router installed; about 4 minutes)
- ``router``: TTFT p50 / p99 through SGLang's router (``sglang-router``) vs direct to the same
  emulator, the same load (not in the default: needs the router installed)
"""

from __future__ import annotations

import argparse
import os

from bench.common import Row, print_rows

CASES = (
    "path",
    "client-delay",
    "scale",
    "ingest",
    "sink-stall",
    "arrival",
    "replay-timing",
    "default-run",
    "h1-parse",
    "simulate",
    "simulate-100k",
    "sim-fleet",
    "router",
    "ray-scale",
    "cluster",
)
DEFAULT = tuple(c for c in CASES if c not in ("router", "ray-scale", "cluster", "sim-fleet", "simulate-100k"))


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "cases",
        nargs="*",
        metavar="CASE",
        help=f"cases to run: {', '.join(CASES)} "
        "(default: all but router, ray-scale, cluster, sim-fleet, simulate-100k)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of result rows")
    parser.add_argument("--quick", action="store_true", help="smallest sizes only (a smoke run)")
    args = parser.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    rows: list[Row] = []
    worker_records_per_s: float | None = None
    for case in args.cases or DEFAULT:
        if case == "path":
            from bench import path

            rows += path.run()
        elif case == "client-delay":
            from bench import client_delay

            rows += client_delay.run((500,) if args.quick else client_delay.SIZES)
        elif case == "scale":
            from bench import ray_scale

            scale_rows = ray_scale.scale(2000 if args.quick else ray_scale.SCALE_AGENTS)
            worker_records_per_s = scale_rows[0].figure
            rows += scale_rows
        elif case == "ingest":
            from bench import ingest

            rows += ingest.run(worker_records_per_s)
        elif case == "sink-stall":
            from bench import sink_stall

            rows += sink_stall.run()
        elif case == "arrival":
            from bench import arrival

            rows += arrival.run()
        elif case == "replay-timing":
            from bench import replay_timing

            rows += replay_timing.run()
        elif case == "default-run":
            from bench import default_run

            rows += default_run.run()
        elif case == "h1-parse":
            from bench import h1_parse

            rows += h1_parse.run()
        elif case == "simulate":
            from bench import simulate

            rows += simulate.run(simulate.SIZES[:1] if args.quick else simulate.SIZES)
        elif case == "simulate-100k":
            from bench import simulate

            quick = simulate.FLEET_QUICK
            rows += simulate.run_fleet_target(*quick) if args.quick else simulate.run_fleet_target()
        elif case == "sim-fleet":
            from bench import sim_fleet

            rows += sim_fleet.run()
        elif case == "router":
            from bench import router

            rows += router.run()
        elif case == "ray-scale":
            from bench import ray_scale

            rows += ray_scale.run(sizes=(500,) if args.quick else ray_scale.SIZES)
        elif case == "cluster":
            from bench import cluster

            rows += cluster.run((1, 2) if args.quick else cluster.WORKERS)
    print_rows(rows, args.json)


if __name__ == "__main__":
    main()
