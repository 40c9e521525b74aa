"""Precision policies against real tensors: torch.autocast's model states, byte for byte,
ZeroRedundancyOptimizer's partition, the planner's knobs, and the simulator's torch_amp."""

from __future__ import annotations

from typing import cast

import pytest
import torch
from torch import nn

from dpsim.labs.ch09_precision.precision_measure import autocast_step
from dpsim.runtime.measure import model_state_breakdown
from dpsim.runtime.models.tiny_transformer import tiny_transformer, token_batch
from dpsim.sim import (
    POLICIES,
    MemoryBreakdown,
    get_cluster,
    plan,
    policy_bytes_per_param,
    policy_model_state_bytes,
    precision_policy,
    scheme_table,
    zero1_optimizer_bytes,
    zero1_partition,
    zero_bytes_per_device,
)
from dpsim.sim.cost.precision import fsdp_policy_rank_bytes, offloaded
from dpsim.sim.strategies.fsdp import FSDPConfig, simulate, step_result, summary
from dpsim.sim.workload import get_workload
from tests.support.bad_input import raises_naming, wrong


@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adam"])
def test_autocast_model_states_equal_the_prediction(optimizer: str) -> None:
    """torch.autocast leaves parameters, gradients and moments in fp32: 4 + 4 + moments."""
    from dpsim.runtime.optimizers import build_optimizer

    model = tiny_transformer(0)
    opt = build_optimizer(optimizer, model.parameters(), 1e-2)
    x, y = token_batch(4)
    with torch.autocast("cpu", torch.bfloat16):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
    assert logits.dtype == torch.bfloat16  # autocast really ran the matmuls in bf16
    loss.backward()
    opt.step()
    n = sum(p.numel() for p in model.parameters())
    measured = model_state_breakdown(model, opt)
    assert measured == policy_model_state_bytes(n, len(list(model.parameters())),
                                                precision_policy("torch_amp"), optimizer)


def test_autocast_step_is_exact_and_differs_from_zero_scheme() -> None:
    step = autocast_step("bf16", "cpu", steps=1, batch=4)
    assert step.states_exact
    assert step.dtypes["parameters"] == "torch.float32"
    assert step.dtypes["logits"] == "torch.bfloat16"
    assert step.zero_scheme.parameters * 2 == step.measured.parameters
    assert step.measured.activations > 0


def test_policy_bytes_per_param() -> None:
    assert policy_bytes_per_param(precision_policy("torch_amp")) == (4, 4, 8)
    assert policy_bytes_per_param(precision_policy("zero_mixed")) == (2, 2, 12)
    assert policy_bytes_per_param(precision_policy("pure_16bit")) == (2, 2, 4)
    assert policy_bytes_per_param(precision_policy("fp32"), "sgd") == (4, 4, 0)
    totals = {name: sum(policy_bytes_per_param(precision_policy(name), "adam"))
              for name in POLICIES}
    # ZeRO's fp16 scheme (Rajbhandari et al. 2020, Sec. 3.1) and torch's: 16 B/param;
    # Megatron-LM in bf16 keeps fp32 main_grad: 18 (Megatron Core, Distributed Optimizer)
    assert totals == {"fp32": 16, "torch_amp": 16, "zero_mixed": 16, "megatron_mixed": 18,
                      "pure_16bit": 8}


def test_megatron_scheme_keeps_fp32_gradients() -> None:
    """bf16 parameters, fp32 main_grad (accumulated and all-reduced in fp32), fp32 master
    and moments; sharding the 12 optimizer bytes over d ranks leaves 6 + 12/d."""
    pol = precision_policy("megatron_mixed")
    assert (pol.param_dtype, pol.grad_dtype, pol.reduce_dtype) == ("bf16", "fp32", "fp32")
    assert policy_bytes_per_param(pol) == (2, 4, 12)
    d = 8
    stage1 = scheme_table(d * 1000, d)[1]
    assert stage1["megatron_total_B"] == 6 * d * 1000 + 12 * 1000
    assert stage1["megatron_grads_B"] == 4 * d * 1000


def test_scheme_table_matches_the_zero_calculator() -> None:
    for stage, row in enumerate(scheme_table(10**6, 8)):
        zero = zero_bytes_per_device(10**6, 8, stage)
        torch_amp = zero_bytes_per_device(10**6, 8, stage, param_bytes=4, grad_bytes=4,
                                          optimizer_bytes=8)
        assert (row["zero_params_B"], row["zero_grads_B"], row["zero_optimizer_B"]) == \
            (zero.parameters, zero.gradients, zero.optimizer)
        assert (row["torch_params_B"], row["torch_grads_B"], row["torch_optimizer_B"]) == \
            (torch_amp.parameters, torch_amp.gradients, torch_amp.optimizer)


def test_scheme_table_differs_only_for_stages_1_and_2() -> None:
    rows = scheme_table(7_500_000_000, 64)
    same = [r["torch_total_B"] == r["zero_total_B"] for r in rows]
    assert same == [True, False, False, True]
    assert [cast(float, r["megatron_total_B"]) > cast(float, r["zero_total_B"])
            for r in rows] == [True] * 4


def test_fsdp_policy_matches_fsdp_shards_and_refuses_master_copies() -> None:
    shapes = [(37, 13), (37,), (5, 37), (5,)]
    b = fsdp_policy_rank_bytes(shapes, 3, 2, precision_policy("torch_amp"))
    # rank 2 of 3: 11 of the 37 rows (chunks of 13), 1 of the 5 rows (chunks of 2)
    assert b.parameters == 4 * (11 * 13 + 11 + 1 * 37 + 1)
    assert b.gradients == b.parameters
    assert b == fsdp_policy_rank_bytes(shapes, 3, 2, precision_policy("fp32"))
    with raises_naming("policy"):

        fsdp_policy_rank_bytes(shapes, 3, 0, precision_policy("zero_mixed"))
    with raises_naming("policy"):

        fsdp_policy_rank_bytes(shapes, 3, 0, precision_policy("megatron_mixed"))


def test_offloaded_keeps_activations_on_device() -> None:
    dev, host = offloaded(MemoryBreakdown(10, 20, 30, 5), True)
    assert (dev.total, host) == (5, 60)
    assert offloaded(MemoryBreakdown(10, 20, 30, 5), False)[1] == 0


def test_zero1_partition_follows_torch() -> None:
    """The same greedy rule as ZeroRedundancyOptimizer._partition_parameters, read off torch."""
    import inspect

    from torch.distributed.optim import ZeroRedundancyOptimizer

    src = inspect.getsource(ZeroRedundancyOptimizer._partition_parameters)  # type: ignore[attr-defined]
    assert "key=lambda t: t.numel(), reverse=True" in src
    assert "_get_min_index" in src
    assert zero1_partition([90, 30, 30, 5], 2) == [[0], [1, 2, 3]]
    assert zero1_optimizer_bytes([90, 30, 30, 5], 2) == [8 * 90 + 4, 8 * 65 + 12]
    with raises_naming("param_numels[1]"):

        zero1_partition([1, -1], 2)


def test_simulated_torch_amp_keeps_fp32_shards_and_gathers_bf16() -> None:
    w, node = get_workload("gpt2-124m"), get_cluster("h100-node")
    amp = summary(simulate(w, node, FSDPConfig(batch_size=1, precision="torch_amp")))
    mixed_trace = simulate(w, node, FSDPConfig(batch_size=1))
    mixed = summary(mixed_trace)
    assert amp.model_bytes == mixed.model_bytes  # all-gathers in bf16 in both
    assert amp.comm_volume_bytes > mixed.comm_volume_bytes  # fp32 reduce-scatter
    off = step_result(simulate(w, node, FSDPConfig(batch_size=1, offload=True)))
    assert off.peak_bytes[0] < step_result(mixed_trace).peak_bytes[0]


def test_fsdp2_default_reduce_dtype_sends_bf16() -> None:
    """MixedPrecisionPolicy(param_dtype=bf16) with reduce_dtype=None reduce-scatters in bf16:
    a third less traffic than reduce_dtype=fp32 (all-gathers 2 + 2, reduce-scatter 2 vs 4),
    the same fp32 shards (what tests/runtime/test_torch_pins_precision.py measures)."""
    w, node = get_workload("gpt-1.3b"), get_cluster("h100-node")
    fp32_rs = plan(w, node, "fsdp", 8, 64, precision="torch_amp")
    bf16_rs = plan(w, node, "fsdp", 8, 64, precision="torch_amp_bf16_reduce")
    assert bf16_rs.traffic_bytes_per_device * 4 == pytest.approx(
        fp32_rs.traffic_bytes_per_device * 3, rel=1e-6)
    assert bf16_rs.model_state_bytes == fp32_rs.model_state_bytes
    assert bf16_rs.peak_bytes == fp32_rs.peak_bytes
    assert bf16_rs.step_s <= fp32_rs.step_s
    with raises_naming("precision"):

        plan(w, node, "ddp", 8, 64, precision="torch_amp_bf16_reduce")


def test_planner_knobs_and_their_refusals() -> None:
    w, node = get_workload("gpt-1.3b"), get_cluster("h100-node")
    base = plan(w, node, "fsdp", 8, 64)
    ckpt = plan(w, node, "fsdp", 8, 64, activation_checkpointing=True)
    assert max(ckpt.peak_bytes) < max(base.peak_bytes)
    assert ckpt.compute_s > base.compute_s
    assert plan(w, node, "zero1", 8, 64, precision="torch_amp").peak_bytes != \
        plan(w, node, "zero1", 8, 64).peak_bytes
    ddp = plan(w, node, "ddp", 8, 64, activation_checkpointing=True)
    assert max(ddp.peak_bytes) < max(plan(w, node, "ddp", 8, 64).peak_bytes)
    with raises_naming("offload"):

        plan(w, node, "ddp", 8, 64, offload=True)
    with raises_naming("precision"):

        plan(w, node, "ddp", 8, 64, precision="torch_amp")
    with raises_naming("activation_checkpointing"):

        plan(w, node, "fsdp", 8, 64, activation_checkpointing=wrong("yes"))


def test_plan_model_state_bytes_are_the_policy_bytes() -> None:
    """DDP in fp32 keeps 4 + 4 + 8 B/param (+ Adam's step per tensor) on every device;
    ZeRO-3 splits them over the devices; DP's replicas hold none after the step."""
    w, node = get_workload("gpt2-124m"), get_cluster("h100-node")
    full = policy_model_state_bytes(w.n_params, w.n_param_tensors,
                                    precision_policy("fp32")).model_states
    ddp = plan(w, node, "ddp", 8, 64, precision="fp32")
    assert ddp.model_state_bytes == (full,) * 8
    fsdp = plan(w, node, "fsdp", 8, 64, precision="fp32")
    assert len(set(fsdp.model_state_bytes)) == 1
    assert fsdp.model_state_bytes[0] == pytest.approx(full / 8, rel=1e-3)
    dp = plan(w, node, "dp", 4, 64, precision="fp32")
    assert dp.model_state_bytes == (full, 0, 0, 0)


def test_bad_policy_names_its_field() -> None:
    with raises_naming("name"):

        precision_policy("amp")
    with raises_naming("low"):

        precision_policy("torch_amp", "fp8")
    with raises_naming("reduce_dtype"):

        precision_policy("zero_mixed", "bf16", "fp32")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fp16_autocast_with_grad_scaler_keeps_fp32_states() -> None:
    step = autocast_step("fp16", "cuda", steps=2, batch=4)
    assert step.states_exact
    assert step.dtypes["logits"] == "torch.float16"
    assert all(torch.isfinite(torch.tensor(step.losses)))


def test_cuda_refused_without_a_gpu_names_the_device() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the refusal is for machines without one")
    with raises_naming("device"):
        autocast_step("bf16", "cuda")


def test_ddp_checkpointing_keeps_the_formula_and_pays_a_forward() -> None:
    from dpsim.sim.cost.memory import checkpointed_activation_bytes
    from dpsim.sim.strategies.ddp import DDPConfig
    from dpsim.sim.strategies.ddp import simulate as simulate_ddp

    w, node = get_workload("gpt2-124m"), get_cluster("h100-node")
    plain = simulate_ddp(w, node, DDPConfig(batch_size=4, dtype="bf16"))
    ckpt = simulate_ddp(w, node, DDPConfig(batch_size=4, dtype="bf16",
                                           activation_checkpointing=True))
    acts = [m.nbytes for m in ckpt.memory if m.category == "activations"]
    assert acts == [checkpointed_activation_bytes(w, 4, "bf16")]
    fwd = ckpt.busy_s(0, "compute") - plain.busy_s(0, "compute")
    assert fwd == pytest.approx(sum(e.end_s - e.start_s for e in plain.events
                                    if e.kind == "forward"))


def test_runtime_entry_points_name_bad_fields() -> None:
    from dpsim.labs.ch09_precision.checkpointing import measure_checkpointing
    from dpsim.runtime.models import BlockStack, TinyTransformer

    with raises_naming("dtype"):
        autocast_step("fp8")
    with raises_naming("batch"):
        measure_checkpointing(batch=0)
    with raises_naming("depth"):
        BlockStack(depth=0)
    with raises_naming("n_heads"):
        TinyTransformer(width=30, n_heads=4)
