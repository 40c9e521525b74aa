import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import pytest

from dpsim.sim.checks import (
    Each,
    Int,
    OneOf,
    Real,
    check_fields,
    checked,
    require_bool,
    require_choice,
    require_finite,
    require_int,
    require_range,
    require_type,
    spec_of,
    within,
)
from dpsim.sim.limits import MAX_COUNT, MAX_SECONDS, MAX_TOTAL_BYTES


def test_range_accepts_inside_and_names_field_outside() -> None:
    assert require_range("lr", 0.5, 0, 1) == 0.5
    with pytest.raises(ValueError, match=r"lr=2 is out of range; allowed >= 0 and <= 1"):
        require_range("lr", 2, 0, 1)
    with pytest.raises(ValueError, match="bandwidth_GBps=0"):
        require_range("bandwidth_GBps", 0, 0, low_inclusive=False)
    with pytest.raises(ValueError, match="nan"):
        require_range("x", float("nan"), 0)


def test_int_rejects_floats_bools_and_negative() -> None:
    assert require_int("n", 3, 1) == 3
    for bad in (2.5, True, "3", -1):
        with pytest.raises(ValueError, match="n="):
            require_int("n", bad, 0)  # type: ignore[arg-type]


def test_choice_lists_the_allowed_values() -> None:
    with pytest.raises(ValueError, match=r"optimizer='adamx' is not known; allowed: 'sgd', 'adam'"):
        require_choice("optimizer", "adamx", ["sgd", "adam"])


def test_bool_rejects_truthy_stand_ins() -> None:
    assert require_bool("overlap", False) is False
    for bad in (0, 1, "yes", None):
        with pytest.raises(ValueError, match=rf"^overlap={bad!r} is not allowed; "
                                             "allowed: True, False$"):
            require_bool("overlap", bad)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, "1", True, None])
def test_require_finite_refuses_what_is_not_a_finite_number(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^latency_us="):
        require_finite("latency_us", bad, 0)  # type: ignore[arg-type]


def test_require_finite_keeps_range_and_returns_the_value() -> None:
    assert require_finite("x", 2.5, 0, 3) == 2.5
    with pytest.raises(ValueError, match=r"x=-1 is out of range; allowed >= 0"):
        require_finite("x", -1, 0)


def test_require_finite_names_inf_as_not_finite_even_above_a_bound() -> None:
    with pytest.raises(ValueError, match=r"^latency_us=inf is not finite; give a finite number "
                                         r">= 0 and <= 10$"):
        require_finite("latency_us", math.inf, 0, 10)
    with pytest.raises(ValueError, match=r"^x=-inf is not finite"):
        require_finite("x", -math.inf)


@pytest.mark.parametrize(("check", "args"), [
    (require_range, ()), (require_range, (0, 1)), (require_finite, ()), (require_finite, (0, 1)),
])
def test_nan_is_refused_without_bounds_too(check: Callable[..., float],
                                           args: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match=r"^x=nan "):
        check("x", math.nan, *args)


@pytest.mark.parametrize("value", [np.float64(0.5), np.float32(0.5), np.int64(1), 1, 0.5])
def test_numbers_of_other_plain_types_are_accepted(value: float) -> None:
    assert require_finite("x", value, 0, 1) == value
    assert require_range("x", value, 0, 1) == value


def test_require_int_takes_numpy_integers_and_refuses_numpy_floats() -> None:
    assert require_int("n", np.int32(3), 0) == 3  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^n=.*is not an integer"):
        require_int("n", np.float64(3.0), 0)  # type: ignore[arg-type]


def test_require_choice_accepts_any_container_and_unhashable_values() -> None:
    assert require_choice("stage", 2, (0, 1, 2, 3)) == 2
    assert require_choice("dtype", "bf16", {"fp32": 4, "bf16": 2}) == "bf16"
    assert require_choice("dtype", "bf16", (d for d in ("fp32", "bf16"))) == "bf16"
    with pytest.raises(ValueError, match=r"^dtype=\['bf16'\] is not known; allowed: 'fp32'"):
        require_choice("dtype", ["bf16"], {"fp32": 4})


def test_require_type_names_the_expected_types_and_shortens_long_values() -> None:
    assert require_type("name", "x", str) == "x"
    with pytest.raises(ValueError, match=r"^layers=3 is not a tuple or list; give a tuple or "):
        require_type("layers", 3, (tuple, list))
    with pytest.raises(ValueError, match=r"^name=\[0, 1, 2, 3, 4, 5, \.\.\.\] is not a str"):
        require_type("name", list(range(10**5)), str)


def test_within_names_the_field_inside_its_container() -> None:
    message = r"^events\[3\]\.start_s=-1 is out of range; allowed >= 0$"
    with pytest.raises(ValueError, match=message), within("events[3]"):
        require_range("start_s", -1, 0)
    with within("events[0]"):
        assert require_range("start_s", 1, 0) == 1


def test_bounds_keep_a_count_in_int64_and_a_time_sum_finite() -> None:
    assert MAX_COUNT < 2**63
    assert MAX_TOTAL_BYTES >= MAX_COUNT * MAX_COUNT * 4  # a count x a batch x a dtype scale
    assert math.isfinite(MAX_SECONDS * 1e200)


# --- specs in type hints: checked() and check_fields() ---------------------------------------

def _bounded(world_size: Annotated[int, Int(1, 8)], lr: Annotated[float, Real(0, 1)] = 0.1,
             kind: Annotated[str, OneOf(("ring", "tree"))] = "ring",
             sizes: Annotated[Sequence[int], Each(Int(0, 9))] = (1,),
             cap: Annotated[int, Int(1, 4)] | None = None, flag: bool = False,
             name: str = "x", anything: Callable[[], int] | None = None) -> int:
    return world_size


def test_checked_calls_through_with_good_arguments() -> None:
    face = checked(_bounded)
    assert face(4, 0.5, "tree", [0, 9], 2, True, "y", lambda: 1) == 4
    assert face.__wrapped__ is _bounded  # type: ignore[attr-defined]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"world_size": 0}, r"^world_size=0 is out of range; allowed >= 1 and <= 8"),
    ({"world_size": True}, r"^world_size=True is not an integer"),
    ({"world_size": 2, "lr": math.nan}, r"^lr=nan is not allowed"),
    ({"world_size": 2, "lr": math.inf}, r"^lr=inf is not finite"),
    ({"world_size": 2, "kind": "mesh"}, r"^kind='mesh' is not known; allowed: 'ring', 'tree'"),
    ({"world_size": 2, "sizes": [1, 10]}, r"^sizes\[1\]=10 is out of range"),
    ({"world_size": 2, "sizes": "12"}, r"^sizes='12' is not a list or tuple"),
    ({"world_size": 2, "sizes": []}, r"^sizes=\[\] has 0 values; allowed: 1 to"),
    ({"world_size": 2, "cap": 5}, r"^cap=5 is out of range"),
    ({"world_size": 2, "flag": 1}, r"^flag=1 is not allowed; allowed: True, False"),
    ({"world_size": 2, "name": 3}, r"^name=3 is not a str"),
])
def test_checked_names_the_argument_a_caller_got_wrong(kwargs: dict[str, Any],
                                                       message: str) -> None:
    with pytest.raises(ValueError, match=message):
        checked(_bounded)(**kwargs)


def test_checked_leaves_defaults_and_unhinted_kinds_alone() -> None:
    assert checked(_bounded)(3, cap=None, anything=None) == 3  # None where None is allowed
    assert spec_of(Callable[[], int]) is None
    assert spec_of(int | Callable[[], int]) is None  # a union with a hint that is no class


@dataclass(frozen=True)
class _Config:
    batch_size: Annotated[int, Int(1, 64)] = 8  # samples per device
    precision: Annotated[str, OneOf(("fp32", "bf16"))] = "fp32"
    overlap: bool = True

    def __post_init__(self) -> None:
        check_fields(self)


def test_check_fields_checks_each_field_against_its_hint() -> None:
    assert _Config(batch_size=64).batch_size == 64
    with pytest.raises(ValueError, match=r"^batch_size=0 is out of range"):
        _Config(batch_size=0)
    with pytest.raises(ValueError, match=r"^precision='fp8' is not known"):
        _Config(precision="fp8")
    with pytest.raises(ValueError, match=r"^overlap=None is not allowed"):
        _Config(overlap=None)  # type: ignore[arg-type]
