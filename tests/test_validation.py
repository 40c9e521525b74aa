import math

import pytest

from dpsim.validation import (
    require_bool,
    require_choice,
    require_finite,
    require_int,
    require_range,
)


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
