"""Chapter 1: the real run measured against dpsim's prediction."""

import pytest
import torch

from dpsim.labs.ch01_single_device.train_single import train
from dpsim.runtime.capture import workload_from_module
from dpsim.runtime.data import classification
from dpsim.runtime.device import resolve_device
from dpsim.runtime.device_calibration import calibrate_device
from dpsim.runtime.models import mlp
from dpsim.sim.cost.compute import step_compute_s
from dpsim.sim.cost.memory import predict_single
from dpsim.sim.hardware import H100_80GB, LAPTOP_CPU
from dpsim.sim.strategies.single import SingleConfig, breakdown, fit_rows, simulate, step_result
from dpsim.sim.workload import Workload, get_workload


@pytest.mark.parametrize("optimizer", ["sgd", "sgd_momentum", "adam", "adamw"])
@pytest.mark.parametrize("shape", [(16, 32, 2, 5, 8), (7, 50, 1, 3, 13)])
def test_model_states_match_real_tensors_to_the_byte(optimizer: str, shape: tuple) -> None:
    n_in, hidden, depth, n_out, batch = shape
    ds = classification(64, n_in, max(n_out, 2), seed=1)
    result = train(mlp(n_in, hidden, depth, max(n_out, 2)), ds, steps=2, batch_size=batch,
                   optimizer=optimizer, progress=False, device="cpu")
    w = workload_from_module(mlp(n_in, hidden, depth, max(n_out, 2)), torch.randn(batch, n_in))
    pred = predict_single(w, batch, optimizer=optimizer)
    meas = result.breakdown
    assert (pred.parameters, pred.gradients, pred.optimizer) == (
        meas.parameters, meas.gradients, meas.optimizer)
    assert abs(pred.activations - meas.activations) <= 0.10 * meas.activations


def test_training_reduces_the_loss_and_is_deterministic() -> None:
    ds = classification(512, 16, 4, seed=0)
    a = train(mlp(16, 32, 2, 4), ds, steps=30, batch_size=32, progress=False, device="cpu")
    b = train(mlp(16, 32, 2, 4), ds, steps=30, batch_size=32, progress=False, device="cpu")
    assert a.losses == b.losses
    assert sum(a.losses[-5:]) < sum(a.losses[:5])
    assert a.samples_per_s > 0
    assert len(a.step_trace().events) == 3


def test_simulated_trace_is_deterministic_and_consistent(tiny_workload: Workload) -> None:
    cfg = SingleConfig(batch_size=32)
    t1 = simulate(tiny_workload, LAPTOP_CPU, cfg)
    t2 = simulate(tiny_workload, LAPTOP_CPU, cfg)
    assert t1 == t2
    step_s = step_result(t1).step_s
    assert step_s == pytest.approx(t1.end_s)
    assert step_s == pytest.approx(step_compute_s(tiny_workload, 32, LAPTOP_CPU))
    # the timeline's peak lies between "all activations, no gradients" (end of forward)
    # and the breakdown's total, which counts every category at once (an upper bound)
    pred = breakdown(t1)
    assert pred.parameters + pred.optimizer + pred.activations <= t1.peak_memory(0)
    assert t1.peak_memory(0) <= pred.total


def test_larger_batches_take_longer_and_more_memory() -> None:
    w = get_workload("gpt2-124m")
    small = simulate(w, H100_80GB, SingleConfig(batch_size=1, dtype="bf16", mixed_precision=True))
    big = simulate(w, H100_80GB, SingleConfig(batch_size=16, dtype="bf16", mixed_precision=True))
    assert step_result(big).step_s > step_result(small).step_s
    assert step_result(big).peak_bytes > step_result(small).peak_bytes


def test_seven_billion_does_not_fit_one_h100() -> None:
    rows = {r["name"]: r for r in fit_rows(["gpt2-124m", "llama-7b"], H100_80GB)}
    assert rows["GPT-2 124M bf16 autocast"]["fits"] is True
    assert rows["7B transformer bf16 autocast"]["fits"] is False
    assert rows["7B transformer bf16 autocast"]["bytes_per_param"] == pytest.approx(16, abs=0.01)


def test_bad_config_raises() -> None:
    with pytest.raises(ValueError, match="batch_size=-4"):
        SingleConfig(batch_size=-4)
    with pytest.raises(ValueError, match="dtype='int4'"):
        SingleConfig(dtype="int4")
    with pytest.raises(ValueError, match="optimizer='rmsprop'"):
        SingleConfig(optimizer="rmsprop")
    with pytest.raises(ValueError, match="batch_size=0"):
        train(mlp(), classification(64), batch_size=0, progress=False)


def test_unusable_gpu_falls_back_to_cpu_with_a_message() -> None:
    dev, note = resolve_device("cuda:7")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 8:
        assert dev.type == "cpu"
        assert "falling back to the CPU" in note
    with pytest.raises(ValueError, match="device='tpu'"):
        resolve_device("tpu")


def test_calibration_gives_positive_rates() -> None:
    dev = calibrate_device("cpu")
    assert dev.fp32_tflops > 0
    assert dev.mem_bw_GBps > 0
    assert dev.op_overhead_us > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_statistics_cover_the_predicted_states() -> None:
    ds = classification(256, 32, 10)
    result = train(mlp(), ds, steps=3, batch_size=64, progress=False, device="cuda")
    assert result.memory.cuda is not None
    w = workload_from_module(mlp(), torch.randn(64, 32))
    pred = predict_single(w, 64)
    assert result.memory.cuda["peak_allocated"] >= pred.model_states
