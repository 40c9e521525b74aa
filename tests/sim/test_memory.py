import pytest

from dpsim.sim import max_batch_size, model_state_bytes, predict_single, zero_bytes_per_device
from dpsim.sim.cost.memory import bytes_per_param
from dpsim.sim.workload import Workload


def test_bytes_per_param_for_adam_is_16_in_fp32_and_mixed() -> None:
    assert bytes_per_param("adam", mixed_precision=False) == 16
    assert bytes_per_param("adam", mixed_precision=True) == 16
    assert bytes_per_param("sgd") == 8
    assert bytes_per_param("sgd_momentum") == 12


def test_adam_counts_one_step_scalar_per_tensor() -> None:
    b = model_state_bytes(1000, 3, optimizer="adam")
    assert b.optimizer == 8 * 1000 + 4 * 3
    assert model_state_bytes(1000, 3, optimizer="sgd").optimizer == 0


def test_mixed_precision_needs_a_16_bit_dtype() -> None:
    with pytest.raises(ValueError, match="mixed_precision"):
        model_state_bytes(10, 1, dtype="fp32", mixed_precision=True)
    with pytest.raises(ValueError, match="optimizer='lion'"):
        model_state_bytes(10, 1, optimizer="lion")
    with pytest.raises(ValueError, match="n_params=-5"):
        model_state_bytes(-5)


def test_zero_paper_example() -> None:
    gb = [zero_bytes_per_device(7_500_000_000, 64, s).total / 1e9 for s in range(4)]
    assert gb[0] == pytest.approx(120, abs=0.05)
    assert gb[1] == pytest.approx(31.4, abs=0.05)
    assert gb[2] == pytest.approx(16.6, abs=0.05)
    assert gb[3] == pytest.approx(1.9, abs=0.05)


def test_max_batch_size_is_the_largest_that_fits(tiny_workload: Workload) -> None:
    budget = 10_000_000
    b = max_batch_size(tiny_workload, budget)
    assert predict_single(tiny_workload, b).total <= budget
    assert predict_single(tiny_workload, b + 1).total > budget
    assert max_batch_size(tiny_workload, 10) == 0
