"""Benchmark runner: `python -m bench [NAME ...]`.

Each module ``bench/bench_*.py`` exposes ``run() -> list[Result]``. The runner prints one table and
writes every result to ``bench/results/latest.json`` so numbers can be compared side by side.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from pathlib import Path

from bench._result import Result

HERE = Path(__file__).parent


def _modules(selected: list[str]) -> list[str]:
    names = sorted(m.name for m in pkgutil.iter_modules([str(HERE)]) if m.name.startswith("bench_"))
    if selected:
        unknown = [s for s in selected if f"bench_{s}" not in names and s not in names]
        if unknown:
            raise SystemExit(
                f"unknown benchmark(s): {', '.join(unknown)}; have: {', '.join(names)}"
            )
        names = [n for n in names if n in selected or n.removeprefix("bench_") in selected]
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    args = parser.parse_args(argv)
    results: list[Result] = []
    for name in _modules(args.names):
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}", flush=True)
        for result in module.run():
            results.append(result)
            print(result.row(), flush=True)
    out = HERE / "results" / "latest.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps([r.to_json() for r in results], indent=2) + "\n")
    failed = [r for r in results if r.target is not None and not r.met]
    print(f"\n{len(results)} results, {len(failed)} below target; JSON in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
