"""Fidelity benchmark: dpsim against published measurements (`python -m dpsim validate`).

    python -m benchmarks.validation

Writes benchmarks/results/validation.json (goal, value, goal_met, worst case per family),
docs/validation.md and docs/validation_figure.json.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    """Run the validation and write its files under the repository root."""
    from dpsim.reports.validation import main as report_main

    return report_main(str(ROOT), write=True)
