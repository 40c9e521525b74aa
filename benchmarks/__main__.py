"""Run every benchmark: python -m benchmarks [name ...]; results go to benchmarks/results/."""

from __future__ import annotations

import importlib
import sys

NAMES = ("planner", "collectives", "ddp", "launch", "fuzz_api", "validation", "grading",
         "single_device", "collective_runs")


def main(argv: list[str]) -> int:
    """Run the named benchmarks (all by default); return 0."""
    for name in argv or NAMES:
        if name not in NAMES:
            raise ValueError(f"benchmark={name!r} is not known; allowed: {', '.join(NAMES)}")
        print(f"== benchmarks.{name}", flush=True)
        module = importlib.import_module(f"benchmarks.{name}")
        run = module.main
        run([]) if name != "planner" else run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
