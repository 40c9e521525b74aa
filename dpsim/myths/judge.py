"""The myths lab: every claim tested, judged by code from its evidence.

`test_claim(number, lab)` gathers the evidence (see `dpsim.myths.evidence`), runs the
claim's checks (`dpsim.myths.claims`) and returns a `Verdict`. The verdict is never
written by hand: `judge` computes it from the deciding checks (core, and not the dpsim
model; the model's checks are shown as "the model says" and never decide):

    right              every deciding check holds
    right, partly untested  every decided deciding check holds, some could not be tested
    wrong              every decided deciding check fails
    half right         some hold and some fail (the verdict says which half)
    inconclusive here  none fails, but a timed one could not be told from noise
    untestable here    no deciding check could be made on this machine
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dpsim.myths.checks import Check
from dpsim.myths.claims import CLAIMS, Claim
from dpsim.myths.evidence import Evidence, Lab, gather
from dpsim.sim import require_choice

PARTLY_UNTESTED = "right, partly untested"
VERDICTS = ("right", PARTLY_UNTESTED, "wrong", "half right", "inconclusive here",
            "untestable here")
# claims decided by timings (a busy machine may leave them inconclusive): none. Claim 6 is
# decided by construction (one process per rank, each its own interpreter and GIL); its
# thread-vs-process timing is shown as an illustration and decides nothing
TIMED_CLAIMS: tuple[int, ...] = ()


def judge(checks: Sequence[Check]) -> str:
    """The verdict of `checks` (see the module docstring); ValueError when no check may
    decide (none is core, or every core check is the dpsim model's)."""
    if not checks:
        raise ValueError("checks=[] is not allowed; a claim needs at least one check")
    deciding = [c for c in checks if c.deciding]
    if not deciding:
        raise ValueError(f"checks={[c.name for c in checks]!r} are not allowed alone: a "
                         "verdict needs a core check that is not the dpsim model "
                         "(measured, re-enacted, published or torch source)")
    held = any(c.holds is True for c in deciding)
    failed = any(c.holds is False for c in deciding)
    if held and failed:
        return "half right"
    if failed:
        return "wrong"
    if any(c.inconclusive for c in deciding):
        return "inconclusive here"
    if not held:
        return "untestable here"
    return PARTLY_UNTESTED if any(c.holds is None for c in deciding) else "right"


@dataclass(frozen=True)
class Verdict:
    """A claim, the evidence gathered for it, its checks and the verdict they give."""

    number: int
    claim: str
    evidence: Evidence = field(repr=False)
    checks: tuple[Check, ...]

    @property
    def verdict(self) -> str:
        """Computed from the checks by `judge`."""
        return judge(self.checks)

    @property
    def source(self) -> str:
        """The kinds of evidence that decided the verdict, e.g. "measured here + published"."""
        kinds = dict.fromkeys(c.kind for c in self.checks if c.deciding and c.holds is not None)
        return " + ".join(kinds) or "nothing decided here"

    @property
    def half(self) -> str:
        """For a half-right verdict: which deciding checks hold and which fail."""
        if self.verdict != "half right":
            return ""
        deciding = [c for c in self.checks if c.deciding]
        held = "; ".join(c.name for c in deciding if c.holds is True)
        failed = "; ".join(c.name for c in deciding if c.holds is False)
        return f"right: {held} — wrong: {failed}"

    @property
    def reason(self) -> str:
        """The checks, each with its outcome and its kind."""
        return "; ".join(c.label for c in self.checks)

    def row(self) -> dict[str, object]:
        """One row of the verdict table."""
        return {"#": self.number, "claim": self.claim, "verdict": self.verdict,
                "evidence": self.source, "because": self.half or self.reason}


def get_claim(number: int) -> Claim:
    """Claim `number` (1..18)."""
    require_choice("number", number, [c.number for c in CLAIMS])
    return CLAIMS[number - 1]


def test_claim(number: int, lab: Lab | None = None) -> Verdict:
    """Gather the evidence for claim `number` and judge it."""
    claim = get_claim(number)
    evidence = gather(number, lab or Lab())
    return Verdict(number, claim.text, evidence, tuple(claim.checks(evidence)))


test_claim.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def run_all(lab: Lab | None = None, numbers: Sequence[int] | None = None) -> list[Verdict]:
    """Every claim (or `numbers`), sharing one Lab: one real launch for all of them."""
    lab = lab or Lab()
    return [test_claim(n, lab) for n in (numbers or [c.number for c in CLAIMS])]


def counts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """How many claims got each verdict."""
    return {v: sum(1 for x in verdicts if x.verdict == v) for v in VERDICTS}


def claims_markdown(verdicts: Sequence[Verdict]) -> str:
    """docs/claims.md: the verdicts the code computed, then every claim's evidence by kind."""
    lines = [
        "# Claims about DP, DDP and FSDP, tested by dpsim",
        "",
        "Generated by `python -m dpsim.myths` from `dpsim.myths.judge.run_all()` on a CPU "
        "machine without CUDA; `tests/course/test_myths.py` fails when this file and the code "
        "disagree. Every piece of evidence carries its kind: **measured here** (real gloo "
        "processes), **re-enacted here** (DataParallel's algorithm on stand-in CPU devices), "
        "**published** (cited), **torch source** (read from the installed torch), or "
        "**the dpsim model** (shown as \"the model says\"; it never decides a verdict). "
        "Verdicts: right (every deciding check holds), right, partly untested (what was "
        "tested holds, some deciding checks could not be tested here), wrong, half right "
        "(which half is said), inconclusive here (a timing hidden by noise), untestable "
        "here. Notebook 08 shows the evidence.",
        "",
        "| # | claim | verdict | decided by | which half |",
        "|---|---|---|---|---|",
    ]
    for v in verdicts:
        lines.append(f"| {v.number} | {v.claim} | {v.verdict} | {v.source} | "
                     f"{v.half or '-'} |")
    lines += ["", "## The evidence, claim by claim", ""]
    for v in verdicts:
        lines += [f"### {v.number}. {v.claim}", "", f"**{v.verdict}**", ""]
        for c in v.checks:
            role = "core" if c.deciding else "detail" if c.kind != "the dpsim model" else "shown"
            cite = f" ({c.cite})" if c.cite else ""
            lines.append(f"- {c.label} ({role}){cite}")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    """Write docs/claims.md from a fresh run."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs" / "claims.md"
    path.write_text(claims_markdown(run_all()))
    print(f"wrote {path}")
