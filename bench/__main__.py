"""``python -m bench [CASE ...] [--json] [--quick]`` runs the benchmark cases and prints one table."""

from __future__ import annotations

import argparse
import os

from bench.common import Row, print_rows

CASES = ("ray-scale", "replay-timing")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "cases", nargs="*", metavar="CASE", help=f"cases to run: {', '.join(CASES)} (default: all)"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of result rows")
    parser.add_argument("--quick", action="store_true", help="smallest sizes only (a smoke run)")
    args = parser.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    rows: list[Row] = []
    for case in args.cases or CASES:
        if case == "ray-scale":
            from bench import ray_scale

            rows += ray_scale.run(sizes=(500,) if args.quick else ray_scale.SIZES)
        elif case == "replay-timing":
            from bench import replay_timing

            rows += replay_timing.run()
    print_rows(rows, args.json)


if __name__ == "__main__":
    main()
