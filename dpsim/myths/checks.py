"""A check: one sub-statement of a claim, the evidence that decides it, and its kind.

Kinds of evidence, strongest first: measured here (a real run on this machine),
re-enacted here (real tensors and threads on stand-in devices), published (a cited
measurement or statement), torch source (read from the installed torch), and the dpsim
model (a simulation: shown as "the model says", never deciding a verdict).
"""

from __future__ import annotations

from dataclasses import dataclass

MEASURED = "measured here"
REENACTED = "re-enacted here"
PUBLISHED = "published"
TORCH = "torch source"
MODEL = "the dpsim model"
KINDS = (MEASURED, REENACTED, PUBLISHED, TORCH, MODEL)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228}  # two-sided 95 % Student t quantiles by degrees of freedom


@dataclass(frozen=True)
class Check:
    """One sub-statement of a claim and whether the evidence supports it.

    holds: True / False, or None when it was not decided here: `inconclusive` (measured,
    but the noise hides the answer) or not tested (no GPU, no run). `core` checks are what
    the claim stands on; details are shown and never decide. A check of kind MODEL never
    decides either. `cite`: the source of a published check, the interval of a timed one,
    or why a check was not tested.
    """

    name: str
    holds: bool | None
    kind: str = MEASURED
    core: bool = True
    cite: str = ""
    inconclusive: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not allowed; allowed: {KINDS}")
        if self.kind == PUBLISHED and not self.cite:
            raise ValueError(f"cite='' is not allowed for a published check ({self.name!r}); "
                             "give the exact source")
        if self.inconclusive and self.holds is not None:
            raise ValueError(f"holds={self.holds!r} with inconclusive=True is not allowed; "
                             "an inconclusive check has holds=None")

    @property
    def deciding(self) -> bool:
        """A core check whose kind may decide a verdict (anything but the dpsim model)."""
        return self.core and self.kind != MODEL

    @property
    def outcome(self) -> str:
        """yes, no, inconclusive here, or untested here."""
        if self.holds is None:
            return "inconclusive here" if self.inconclusive else "untested here"
        return "yes" if self.holds else "no"

    @property
    def label(self) -> str:
        """How the check reads in a verdict: the model's checks say so."""
        said = "the model says: " if self.kind == MODEL else ""
        return f"{said}{self.name}: {self.outcome} [{self.kind}]"


def mean_interval(samples: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its 95 % t interval; one sample gives (x, -inf, inf)."""
    n = len(samples)
    if n == 0:
        raise ValueError("samples=[] is not allowed; give at least one sample")
    mean = sum(samples) / n
    if n == 1:
        return mean, float("-inf"), float("inf")
    sd = (sum((x - mean) ** 2 for x in samples) / (n - 1)) ** 0.5
    half = T95[min(n - 1, max(T95))] * sd / n**0.5
    return mean, mean - half, mean + half


def above(name: str, samples: list[float], threshold: float, unit: str = "") -> Check:
    """Timed check "mean of samples > threshold": yes / no only when the 95 % interval
    lies wholly on one side; inconclusive here otherwise (never a no from noise)."""
    mean, low, high = mean_interval(samples)
    holds = True if low > threshold else False if high < threshold else None
    span = f"mean {mean:.2f}{unit}, 95 % interval [{low:.2f}, {high:.2f}] over {len(samples)}"
    return Check(name, holds, MEASURED, cite=span, inconclusive=holds is None)


def below(name: str, samples: list[float], threshold: float, unit: str = "") -> Check:
    """Timed check "mean of samples < threshold", decided like `above`."""
    flipped = above(name, [-x for x in samples], -threshold)
    mean, low, high = mean_interval(samples)
    span = f"mean {mean:.2f}{unit}, 95 % interval [{low:.2f}, {high:.2f}] over {len(samples)}"
    return Check(name, flipped.holds, MEASURED, cite=span, inconclusive=flipped.inconclusive)


def untested(name: str, kind: str, why: str, core: bool = True) -> Check:
    """A check that could not be made here, and why."""
    return Check(name, None, kind, core, cite=why)
