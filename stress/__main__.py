"""Run the stress campaigns: ``python -m stress [NAME ...] [--scale S]``.

Every campaign stops by itself at its count cap or its time cap, whichever comes first, and
reports a row of the table. Exit status 1 when any campaign found a failure.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable

from stress._report import Outcome, table

CAMPAIGNS = [
    "faults",
    "crash",
    "contention",
    "cli",
    "loaders",
    "secrets",
    "quota",
    "once",
    # issue 31: the pollux command, all five wires, damaged stores and FIFOs, many tenants
    "pollux_cli",
    "wires",
    "stores",
    "tenants",
    # issue 32: teams of agents in 8 processes, nested and shared limits
    "teams",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stress", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"campaigns (default: all of {CAMPAIGNS})")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every count and time cap (default 1)"
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in CAMPAIGNS]
    if unknown:
        parser.error(f"unknown campaign(s) {unknown}; have {CAMPAIGNS}")
    outcomes: list[Outcome] = []
    for name in args.names or CAMPAIGNS:
        module = importlib.import_module(f"stress.camp_{name}")
        run: Callable[[float], list[Outcome]] = module.run
        start = time.monotonic()
        print(f"== {name}", flush=True)
        for outcome in run(args.scale):
            if not outcome.seconds:
                outcome.seconds = time.monotonic() - start
            outcomes.append(outcome)
            print(f"   {outcome.name}: {outcome.verdict} {outcome.figure}", flush=True)
    print()
    print(table(outcomes))
    failed = [o for o in outcomes if o.verdict == "FAIL"]
    print(f"\n{len(outcomes)} campaigns, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
