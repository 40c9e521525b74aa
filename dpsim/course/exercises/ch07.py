"""Chapter 7 exercises: choose a strategy, a device count and a batch from the planner's numbers.

The learner gets what `dpsim.sim.planner.plan` reports (step time, peak bytes per device) as
plain numbers and applies the chapter's rules: a plan is usable when every device's peak
fits its memory, and good enough when its step meets the target. The right answers come
from the planner itself (`PlanResult.fits`, `step_s`, a search over batches), so the
planner's functions are forbidden in the answers. Everything here is simulated.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from dpsim.course.grading.registry import Case, exercise
from dpsim.sim import CLUSTERS, POWERS_OF_TWO, PlanResult, get_workload, plan, strategy_names

FORBIDDEN = ("dpsim.sim.planner.plan", "dpsim.sim.planner.scaling_curve",
             "dpsim.sim.planner.summary_table",
             "dpsim.sim.planner.crossover", "dpsim.sim.planner.check_batch")
MODELS = ("gpt2-124m", "gpt-1.3b", "llama-7b")


def _row(p: PlanResult) -> dict[str, Any]:
    return {"strategy": p.strategy, "n_devices": p.n_devices, "step_s": p.step_s,
            "peak_bytes": list(p.peak_bytes)}


def _plans(model: str, cluster: str, n: int, batch: int) -> list[PlanResult]:
    out = []
    for s in strategy_names():
        try:
            out.append(plan(get_workload(model), CLUSTERS[cluster], s, n, batch))
        except ValueError:  # one device only (single), or one node only (dp)
            continue
    return out


def _refit(p: PlanResult, memory: int) -> bool:
    return max(p.peak_bytes) <= memory


# --- 7.1 ----------------------------------------------------------------------------------


def _simplest(plans: list[PlanResult], memory: int, target: float, fit: Any = _refit,
              use_target: bool = True, fastest: bool = False) -> str | None:
    ok = [p for p in plans if fit(p, memory) and (p.step_s <= target or not use_target)]
    if fastest:
        ok = sorted(ok, key=lambda p: p.step_s)
    return ok[0].strategy if ok else None


@exercise("7.1", function="choose_strategy",
          title="The simplest strategy that fits and meets the step-time target", points=2,
          forbidden=FORBIDDEN)
def _choose_cases(rng: random.Random) -> Iterator[Case]:
    GiB = 2**30
    setups = [  # model, cluster, devices, global batch, memory bytes, target step seconds
        ("gpt-1.3b", "h100-node", 8, 128, 80 * GiB, rng.uniform(0.55, 0.65)),
        ("llama-7b", "h100-node", 8, 64, 80 * GiB, 10.0),  # nothing fits
        ("gpt2-124m", "pcie-4gpu", 2, 16, rng.randint(7, 8) * 10**9, 0.2),  # DP: device 0
        ("gpt2-124m", "pcie-4gpu", 4, 64, int(rng.uniform(9.2, 10.5) * 1e9), 0.1),
        ("llama-7b", "h100-ib-4", 32, 256, 160 * 10**9, rng.uniform(2.6, 2.8)),
        ("gpt2-124m", "h100-node", 8, 64, 80 * GiB, rng.uniform(0.02, 0.05)),  # DP too slow
    ]
    for model, cluster, n, batch, memory, target in setups:
        plans = _plans(model, cluster, n, batch)
        rows = [_row(p) for p in plans]
        yield Case(f"{model} on {cluster}, {n} devices, global batch {batch}, strategies "
                   f"{[p.strategy for p in plans]}, memory_bytes={memory}, "
                   f"target_step_s={target:.4g}",
                   args=(rows, memory, target), expected=_simplest(plans, memory, target),
                   mistakes={
                       "you did not check memory: a plan must fit on every device":
                           _simplest(plans, 10**18, target),
                       "you checked one device's peak only; DP's device 0 holds more than "
                       "the others, and every device must fit":
                           _simplest(plans, memory, target,
                                     lambda p, m: p.peak_bytes[-1] <= m),
                       "you ignored the step-time target":
                           _simplest(plans, memory, target, use_target=False),
                       "you picked the fastest; the rule takes the first (simplest) plan "
                       "that is good enough": _simplest(plans, memory, target, fastest=True),
                   })


# --- 7.2 ----------------------------------------------------------------------------------


def _fewest(curve: list[PlanResult], memory: int, target: float, *, largest: bool = False,
            check_memory: bool = True) -> int | None:
    ok = [p.n_devices for p in curve
          if p.step_s <= target and (_refit(p, memory) or not check_memory)]
    return (max(ok) if largest else min(ok)) if ok else None


@exercise("7.2", function="fewest_devices",
          title="The fewest devices that fit and meet a step-time target", points=2,
          forbidden=FORBIDDEN)
def _devices_cases(rng: random.Random) -> Iterator[Case]:
    setups = [("llama-7b", "h100-ib-16", "fsdp", 512), ("gpt-1.3b", "h100-ib-16", "ddp", 256),
              ("gpt2-124m", "h100-ib-4", "ddp", 1024), ("llama-7b", "h100-ib-16", "zero2", 128)]
    for index, (model, cluster, strategy, batch) in enumerate(setups):
        curve = [plan(get_workload(model), CLUSTERS[cluster], strategy, n, batch)
                 for n in POWERS_OF_TWO if n <= min(batch, 128)]
        memory = CLUSTERS[cluster].device.memory_bytes
        steps = sorted(p.step_s for p in curve)
        target = (steps[0] * 0.5 if index == 3 else
                  steps[rng.randrange(1, len(steps) - 1)] * rng.uniform(1.0, 1.05))
        right = _fewest(curve, memory, target)
        rows = [_row(p) for p in curve]
        yield Case(f"{model}, {strategy} on {cluster}, global batch {batch}, devices "
                   f"{[p.n_devices for p in curve]}, memory_bytes={memory}, "
                   f"target_step_s={target:.4g}",
                   args=(rows, memory, target), expected=right, mistakes={
                       "you returned the largest count that works; the question is the "
                       "fewest": _fewest(curve, memory, target, largest=True),
                       "you did not check memory: too few devices may not fit":
                           _fewest(curve, memory, target, check_memory=False),
                   })


# --- 7.3 ----------------------------------------------------------------------------------


def _planner_largest_batch(model: str, cluster: str, strategy: str, n: int, memory: int
                          ) -> int:
    """The largest global batch (n x local batch) whose plan fits `memory`, by search."""
    def fits(local: int) -> bool:
        p = plan(get_workload(model), CLUSTERS[cluster], strategy, n, n * local)
        return _refit(p, memory)

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return n * low


@exercise("7.3", function="largest_global_batch",
          title="The largest global batch that fits, from two plans", points=2,
          forbidden=FORBIDDEN)
def _batch_cases(rng: random.Random) -> Iterator[Case]:
    setups = [("gpt-1.3b", "h100-node", "ddp", 8), ("llama-7b", "h100-node", "fsdp", 8),
              ("gpt2-124m", "pcie-4gpu", "ddp", 4), ("llama-7b", "h100-ib-4", "zero1", 32),
              ("gpt-1.3b", "a100-node", "zero2", 8)]
    for model, cluster, strategy, n in setups:
        memory = CLUSTERS[cluster].device.memory_bytes
        if rng.random() < 0.5:
            memory = memory * rng.choice([1, 2]) // 2
        one, two = (max(plan(get_workload(model), CLUSTERS[cluster], strategy, n, n * b)
                        .peak_bytes) for b in (1, 2))
        right = _planner_largest_batch(model, cluster, strategy, n, memory)
        per_sample = two - one
        linear = n * max(0, (memory - one) // per_sample + 1) if one <= memory else 0
        if linear != right:
            raise RuntimeError("dpsim's plans are not linear in the local batch here")
        yield Case(f"{model}, {strategy} on {n} devices of {cluster}: peak at local batch 1 = "
                   f"{one}, at 2 = {two}, memory_bytes={memory}",
                   args=(one, two, memory, n), expected=right, mistakes={
                       "you returned the local batch; the global batch is n_devices times it":
                           right // n,
                       "you divided the whole memory by the bytes per sample, forgetting the "
                       "fixed part (model states, buffers)": n * (memory // per_sample),
                       "you counted one sample too many (local batch 1 already holds one)":
                           n * ((memory - one) // per_sample + 2) if one <= memory else None,
                       "you counted one sample too few":
                           n * ((memory - one) // per_sample) if one <= memory else None,
                   })
