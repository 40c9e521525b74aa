"""Chapter 9 exercises: an autocast step with its memory, clipping that works on DTensors,
meta-device initialisation.

Every expected answer is computed with torch itself while the cases are built: the same
step run by torch.autocast and measured on real tensors, `torch.nn.utils.clip_grad_norm_`
on plain tensors, an eager build of the same model from the same seed. The learner's
function runs through a module-level `_call_*` that builds its inputs from plain data
and returns plain data (lists of floats, ints, strings).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from dpsim.course.grading.compare import summed_rel_tol
from dpsim.course.grading.ranks import run_specs
from dpsim.course.grading.registry import Case, exercise
from dpsim.runtime.models import build_model, layer_stack

ON_META = "still on the meta device"


# --- 9.1 an autocast training step, and its model-state bytes ------------------------------

def _amp_model(width: int, seed: int) -> nn.Module:
    return build_model("stack", seed=seed, widths=[7, width, 3], activation="gelu", norm=True)


def _amp_data(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(batch, 7, generator=g), torch.randint(0, 3, (batch,), generator=g)


def _amp_outcome(model: nn.Module, opt: torch.optim.Optimizer, answer: Any) -> dict[str, Any]:
    try:
        said: Any = [int(b) for b in answer]
    except (TypeError, ValueError):
        said = repr(answer)
    return {"bytes": said,
            "param_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
            "params": [round(float(v), 5) for p in model.parameters()
                       for v in p.detach().float().flatten()[:4]],
            # gradients computed in bf16 differ from fp32 ones in the third digit
            "grads": [round(float(v), 6) if p.grad is not None else "none"
                      for p in model.parameters()
                      for v in (p.grad.float().flatten()[:4] if p.grad is not None else [0])]}


def _call_amp(fn: Callable[..., Any], *, width: int, batch: int, seed: int) -> dict[str, Any]:
    """Run the learner's `fn(model, optimizer, x, y)` once; its answer and the state after."""
    model = _amp_model(width, seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    x, y = _amp_data(batch, seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the reference: bf16 sums depend on the thread count
    try:
        answer = fn(model, opt, x, y)
    finally:
        torch.set_num_threads(threads)
    return _amp_outcome(model, opt, answer)


def _reference_amp(width: int, batch: int, seed: int, autocast: bool = True
                   ) -> tuple[dict[str, Any], list[int]]:
    """torch's own step (autocast bf16, Adam); the outcome and the bytes measured."""
    from dpsim.runtime.measure import model_state_breakdown

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the sandbox: bf16 sums depend on the thread count
    try:
        return _reference_amp_one_thread(width, batch, seed, autocast, model_state_breakdown)
    finally:
        torch.set_num_threads(threads)


def _reference_amp_one_thread(width: int, batch: int, seed: int, autocast: bool,
                              breakdown: Any) -> tuple[dict[str, Any], list[int]]:
    model = _amp_model(width, seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    x, y = _amp_data(batch, seed)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    b = breakdown(model, opt)
    measured = [b.parameters, b.gradients, b.optimizer]
    return _amp_outcome(model, opt, measured), measured


@exercise("9.1", function="autocast_step_bytes", title="An autocast step and the bytes it keeps",
          points=3, forbidden=("dpsim.sim.cost.precision.policy_model_state_bytes",
                               "dpsim.runtime.measure.model_state_breakdown",
                               "dpsim.sim.cost.memory.model_state_bytes"))
def _amp_cases(rng: random.Random) -> Iterator[Case]:
    for _ in range(3):
        width, batch, seed = rng.choice([5, 9, 16, 33]), rng.choice([4, 8]), rng.randint(0, 999)
        right, measured = _reference_amp(width, batch, seed)
        fp32, _ = _reference_amp(width, batch, seed, autocast=False)
        n = sum(p.numel() for p in _amp_model(width, seed).parameters())
        zero = dict(right, bytes=[2 * n, 2 * n, 12 * n + 4 * 6])
        no_step = dict(right, bytes=[measured[0], measured[1], measured[2] - 4 * 6])
        yield Case(f"a Linear-LayerNorm-GELU-Linear model of width {width}, batch {batch}, "
                   f"seed {seed}, Adam", expected=right,
                   call=_call_amp, kwargs={"width": width, "batch": batch, "seed": seed},
                   explain=functools.partial(_explain_amp, n, zero["bytes"]),
                   mistakes={
                       BF16_BYTES: dict(right, bytes=[2 * n, 2 * n, 4 * n + 4 * 6]),
                       "the parameters after the step are those of an fp32 step: run the "
                       "forward and the loss inside torch.autocast('cpu', torch.bfloat16)":
                           dict(fp32, bytes=measured),
                       "that is ZeRO's scheme (2 + 2 + 12); torch.autocast keeps fp32 "
                       "parameters, fp32 gradients and two fp32 moments, 4 + 4 + 8 bytes "
                       "per element": zero,
                       "Adam keeps a 4-byte `step` tensor for every parameter tensor": no_step,
                   })


BF16_BYTES = ("you counted bf16 bytes (2 per element); under torch.autocast the parameters stay "
              "fp32, and so do their gradients and Adam's moments: autocast casts copies for "
              "the ops inside it, so 4 + 4 + 8 bytes per element")


def _explain_amp(n: int, zero: list[int], answer: Any) -> str | None:
    """Parameters or gradients counted at 2 bytes an element (but not ZeRO's whole scheme,
    which has its own hint)."""
    said = answer.get("bytes") if isinstance(answer, dict) else None
    if isinstance(said, list) and said != zero and 2 * n in said[:2]:
        return f"looks like {BF16_BYTES}"
    return None


# --- 9.2 clipping that works when gradients are DTensors ---------------------------------

MESH_RANKS = 2  # a 1-rank mesh would hide the mistake chapter 9 warns about: .to_local() norms
MAX_TERMS = 3 * 5 * 4  # at most 3 gradients of 5 x 4 entries summed into the norm


def _full(t: Any) -> list[float]:
    t = t.full_tensor() if hasattr(t, "full_tensor") else t
    return [float(v) for v in torch.as_tensor(t).flatten()]


def _clip_with(fn: Callable[..., Any], grads: list[list[list[float]]], max_norm: float,
               mesh: Any) -> dict[str, Any]:
    """Parameters whose .grad are `grads` (DTensors sharded on dim 0 over `mesh`, if any);
    the learner's norm and the full gradients after `fn(params, max_norm)`, unrounded."""
    params: list[nn.Parameter] = []
    for g in grads:
        value = torch.tensor(g)
        p = nn.Parameter(torch.zeros_like(value))
        if mesh is not None:
            from torch.distributed.tensor import Shard, distribute_tensor

            p = nn.Parameter(distribute_tensor(torch.zeros_like(value), mesh, [Shard(0)]))
            value = distribute_tensor(value, mesh, [Shard(0)])
        p.grad = value
        params.append(p)
    norm = fn(params, max_norm)
    return {"norm": _full(norm)[0] if isinstance(norm, torch.Tensor) else float(norm),
            "grads": [_full(p.grad) for p in params]}


def _call_clip(fn: Callable[..., Any], *, grads: list[list[list[float]]], max_norm: float
               ) -> dict[str, Any]:
    """Plain-tensor gradients, in this process."""
    return _clip_with(fn, grads, max_norm, None)


def _clip_worker(rank: int, world_size: int, fn: Callable[..., Any], spec: dict[str, Any],
                 init_method: str, path: str) -> dict[str, Any]:
    """On a real rank: DTensor gradients sharded over a `world_size`-rank mesh."""
    from torch.distributed.device_mesh import init_device_mesh

    from dpsim.course.grading.ranks import join

    with join(rank, world_size, init_method):
        mesh = init_device_mesh("cpu", (world_size,))
        return _clip_with(fn, spec["grads"], spec["max_norm"], mesh)


def run_clip(fn: Callable[..., Any], specs: list[dict[str, Any]], index: int
             ) -> list[dict[str, Any]]:
    """Every rank's norm and full gradients in DTensor case `index` (one launch for all)."""
    return run_specs(_clip_worker, fn, specs)[index]


def _reference_clip(grads: list[list[list[float]]], max_norm: float, scale: bool = True
                    ) -> dict[str, Any]:
    params = [nn.Parameter(torch.zeros(len(g), len(g[0]))) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = torch.tensor(g)
    norm = nn.utils.clip_grad_norm_(params, max_norm) if scale else torch.linalg.vector_norm(
        torch.cat([p.grad.flatten() for p in params if p.grad is not None]))
    return {"norm": float(norm), "grads": [_full(p.grad) for p in params]}


def _local_norm_clip(grads: list[list[list[float]]], max_norm: float, world_size: int
                     ) -> list[dict[str, Any]]:
    """Each rank's answer when it clips by the norm of its own shards (`.to_local()`)."""
    full = [torch.tensor(g) for g in grads]
    out = []
    for rank in range(world_size):
        shards = [t.chunk(world_size)[rank] if rank < len(t.chunk(world_size))
                  else t[:0] for t in full]
        local = _reference_clip([s.tolist() for s in shards if len(s)], max_norm,
                                scale=False)["norm"]
        coef = min(max_norm / (local + 1e-6), 1.0)
        out.append({"norm": local, "grads": [_full(t * coef) for t in full]})
    # every rank's full gradients hold each rank's shard scaled by that rank's coefficient
    for g_index, t in enumerate(full):
        pieces = [torch.tensor(out[r]["grads"][g_index]).reshape(t.shape).chunk(world_size)[r]
                  for r in range(min(world_size, len(t.chunk(world_size))))]
        for answer in out:
            answer["grads"][g_index] = _full(torch.cat(pieces))
    return out


def _random_grads(rng: random.Random) -> list[list[list[float]]]:
    grads = [[[round(rng.uniform(-1, 1), 3) for _ in range(rng.randint(1, 4))]
              for _ in range(rng.randint(2, 5))] for _ in range(rng.randint(2, 3))]
    return [[row[:len(g[0])] + [0.0] * (len(g[0]) - len(row)) for row in g] for g in grads]


@exercise("9.2", function="clip_grads", title="Clip gradients by their global norm, DTensors "
          "included", points=2,
          # the norm sums up to MAX_TERMS float32 squares in an order of the learner's choice
          rel_tol=summed_rel_tol(MAX_TERMS))
def _clip_cases(rng: random.Random) -> Iterator[Case]:
    plan = ((False, 0.5), (True, 0.5), (True, 100.0), (False, 1.0))
    grads_of = [_random_grads(rng) for _ in plan]
    specs = [{"world_size": MESH_RANKS, "grads": g, "max_norm": m}
             for (dtensor, m), g in zip(plan, grads_of, strict=True) if dtensor]
    for (dtensor, max_norm), grads in zip(plan, grads_of, strict=True):
        right = _reference_clip(grads, max_norm)
        each = [_reference_clip([g], max_norm) for g in grads]
        each_grads = [e["grads"][0] for e in each]
        explain = functools.partial(_explain_clip, each_grads, right["grads"])
        mistakes = {
            PER_PARAMETER: {"norm": each[0]["norm"], "grads": each_grads},
            "gradients are unchanged: scale every p.grad in place by "
            "max_norm / (total_norm + 1e-6) when that is below 1":
                _reference_clip(grads, max_norm, scale=False),
        }
        label = f"{len(grads)} parameters, max_norm={max_norm}, "
        if not dtensor:
            yield Case(label + "plain tensors", expected=right, call=_call_clip,
                       kwargs={"grads": grads, "max_norm": max_norm}, mistakes=mistakes,
                       explain=explain)
            continue
        index = next(i for i, s in enumerate(specs) if s["grads"] is grads)
        yield Case(label + f"gradients are DTensors sharded on dim 0 over a {MESH_RANKS}-rank "
                   "mesh (every rank's answer)", args=(specs, index), expected=[right] * MESH_RANKS,
                   call=run_clip, explain=explain,
                   mistakes={**{words: [wrong] * MESH_RANKS for words, wrong in mistakes.items()},
                             "each rank clipped by the norm of its own shards (.to_local()); "
                             "sum the squares over the DTensors themselves, so the mesh "
                             "reduces them, and take .full_tensor() of the result":
                                 _local_norm_clip(grads, max_norm, MESH_RANKS)})


PER_PARAMETER = ("you clipped each gradient by its own norm; the norm is over all of them "
                 "together (one total norm, one coefficient for every gradient)")


def _explain_clip(each: list[list[float]], right: list[list[float]], answer: Any
                  ) -> str | None:
    """Gradients clipped one by one, whatever norm the function returned (on every rank)."""
    from dpsim.course.grading.compare import same

    rows = answer if isinstance(answer, list) else [answer]
    grads = [r.get("grads") if isinstance(r, dict) else None for r in rows]
    if grads and not same(each, right, 1e-5) and all(
            same(g, each, 1e-5, 1e-7) for g in grads):
        return f"looks like {PER_PARAMETER}"
    return None


# --- 9.3 meta-device initialisation ------------------------------------------------------

def _meta_model(widths: list[int]) -> nn.Sequential:
    return layer_stack(widths, activation="gelu", norm=True, after_last=True)


def _params(model: nn.Module) -> list[list[float]]:
    return [[round(float(v), 6) for v in p.detach().flatten()] for p in model.parameters()]


def _call_meta(fn: Callable[..., Any], *, widths: list[int], seed: int) -> dict[str, Any]:
    """Build on the meta device, seed, and let the learner's `fn(model)` materialise it."""
    with torch.device("meta"):
        model = _meta_model(widths)
    torch.manual_seed(seed)
    out = fn(model)
    out = model if out is None else out
    on_meta = sum(p.is_meta for p in out.parameters())
    return {"on_meta": on_meta, "params": _params(out) if not on_meta else ON_META}


NOT_INITIALISED = ("looks like the parameters were allocated but not initialised: after "
                   "model.to_empty(device='cpu'), call reset_parameters() on every module "
                   "that has one (to_empty leaves whatever the memory held)")
WRONG_ORDER = ("your parameters are initialised, but not as an eager build draws them: the "
               "random numbers go to the modules in another order. Call reset_parameters() "
               "on the modules in model.modules() order, the order the eager constructor ran "
               "them in")
INIT_ROUNDING = 1e-6  # the answer's values are rounded to 6 decimals (`_params`)


def _initialised(widths: list[int], params: Any) -> bool:
    """Whether `params` (an answer's) are values torch's own initialisers give this model:
    every Linear weight and bias within +-1/sqrt(fan_in), every LayerNorm weight 1 and
    bias 0 (a random model in the wrong order looks so; memory left by to_empty does not)."""
    model = _meta_model_shapes(widths)
    rules: list[tuple[float, float]] = []  # (lowest, highest) of each parameter's values
    for m in model.modules():
        if isinstance(m, nn.Linear):
            bound = 1 / m.in_features ** 0.5
            rules += [(-bound, bound)] * len(list(m.parameters(recurse=False)))
        elif isinstance(m, nn.LayerNorm):
            rules += [(1.0, 1.0), (0.0, 0.0)]
    if not isinstance(params, list) or len(params) != len(rules):
        return False
    try:
        return all(isinstance(values, list) and values and all(
            low - INIT_ROUNDING <= float(v) <= high + INIT_ROUNDING for v in values)
            for values, (low, high) in zip(params, rules, strict=True))
    except (TypeError, ValueError):
        return False


def _meta_model_shapes(widths: list[int]) -> nn.Module:
    with torch.device("meta"):
        return _meta_model(widths)


def _explain_meta(widths: list[int], answer: Any) -> str | None:
    """Allocated (nothing on meta) but wrong values: initialised in another order, or
    to_empty without reset_parameters."""
    if isinstance(answer, dict) and answer.get("on_meta") == 0:
        return (f"looks like {WRONG_ORDER}" if _initialised(widths, answer.get("params"))
                else NOT_INITIALISED)
    return None


def _reversed_init(widths: list[int], seed: int) -> list[list[float]]:
    """The parameters when reset_parameters runs on the modules in reverse order."""
    with torch.device("meta"):
        model = _meta_model(widths)
    model.to_empty(device="cpu")
    torch.manual_seed(seed)
    for m in reversed(list(model.modules())):
        reset = getattr(m, "reset_parameters", None)
        if callable(reset):
            reset()
    return _params(model)


@exercise("9.3", function="materialize", title="Initialise a model built on the meta device",
          points=2)
def _meta_cases(rng: random.Random) -> Iterator[Case]:
    for index in range(3):
        # the first case has two Linear layers at least, so that their order shows
        widths = [rng.randint(2, 6) for _ in range(rng.randint(3 if index == 0 else 2, 4))]
        seed = rng.randint(0, 999)
        torch.manual_seed(seed)
        eager = _meta_model(widths)
        expected = {"on_meta": 0, "params": _params(eager)}
        yield Case(f"Linear/LayerNorm/GELU widths {widths}, torch.manual_seed({seed}) before "
                   "your call", expected=expected, explain=functools.partial(_explain_meta,
                                                                             widths),
                   call=_call_meta, kwargs={"widths": widths, "seed": seed},
                   mistakes={
                       "parameters are still on the meta device: allocate them with "
                       "model.to_empty(device='cpu')":
                           {"on_meta": len(list(eager.parameters())), "params": ON_META},
                       WRONG_ORDER: {"on_meta": 0, "params": _reversed_init(widths, seed)},
                   })
