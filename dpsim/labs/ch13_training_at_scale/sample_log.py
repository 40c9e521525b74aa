"""Which samples a run saw, against an uninterrupted run's: replayed and skipped ids."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def replayed_and_skipped(seen: Iterable[int], reference: Iterable[int]) -> tuple[int, int]:
    """(samples seen more often than in `reference`, samples seen less often), counted with
    multiplicity: a sample seen twice where the reference saw it once counts once."""
    got, want = Counter(seen), Counter(reference)
    replayed = sum((got - want).values())
    skipped = sum((want - got).values())
    return replayed, skipped
