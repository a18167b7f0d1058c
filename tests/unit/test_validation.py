"""fedaug.validation: one shape of bad-value message; interval ends, NaN, bools and numpy scalars."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from fedaug.errors import ConfigError, PartitionError
from fedaug.validation import check_bool, check_choice, check_int, check_number, flag_int, flag_number


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: check_number("train.lr", math.nan, 0, low_open=True),
            "train.lr must be a finite number > 0, got nan",
        ),
        (lambda: check_number("x", math.inf), "x must be a finite number, got inf"),
        (lambda: check_number("x", 1.5, 0, 1), "x must be a finite number in [0, 1], got 1.5"),
        (lambda: check_number("x", 1, 0, 1, high_open=True), "x must be a finite number in [0, 1), got 1"),
        (lambda: check_number("x", 2, high=1), "x must be a finite number <= 1, got 2"),
        (lambda: check_number("x", True, 0), "x must be a finite number >= 0, got True"),
        (lambda: check_number("x", "1", 0), "x must be a finite number >= 0, got '1'"),
        (lambda: check_number("x", -1, 0, allow_none=True), "x must be a finite number >= 0 or null, got -1"),
        (lambda: check_int("--workers", 0, 1, 1024), "--workers must be in 1..1024, got 0"),
        (lambda: check_int("n", 0, 1), "n must be >= 1, got 0"),
        (lambda: check_int("n", 2.0, 1), "n must be an integer, got 2.0"),
        (lambda: check_int("n", False, 0), "n must be an integer, got False"),
        (lambda: check_int("n", "3", 0, allow_none=True), "n must be an integer or null, got '3'"),
        (lambda: check_int("r", 0, 1, 10, why=" (a cap)"), "r must be in 1..10 (a cap), got 0"),
        (
            lambda: check_choice("opt", "adagrad", ("adam", "sgd")),
            "opt must be one of adam, sgd, got 'adagrad'",
        ),
        (lambda: check_choice("c", True, (1, 3)), "c must be one of 1, 3, got True"),
        (lambda: check_bool("b", "yes"), "b must be true or false, got 'yes'"),
    ],
)
def test_messages_name_key_valid_values_and_the_value(call, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        call()
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "call",
    [
        lambda: check_number("x", 0, 0),
        lambda: check_number("x", 1, 0, 1),
        lambda: check_number("x", 0.5, 0, 1, low_open=True, high_open=True),
        lambda: check_number("x", np.float32(0.5), 0, 1),
        lambda: check_number("x", None, 0, allow_none=True),
        lambda: check_int("n", np.int64(3), 1, 3),
        lambda: check_int("n", None, 1, allow_none=True),
        lambda: check_choice("c", 3, (3, 9)),
        lambda: check_bool("b", False),
    ],
)
def test_valid_values_pass(call) -> None:
    call()


def test_the_caller_chooses_the_error_class() -> None:
    with pytest.raises(PartitionError, match=r"^alpha must be a finite number > 0, got 0$"):
        check_number("alpha", 0, 0, low_open=True, error=PartitionError)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (flag_int(1), "0", "must be >= 1, got 0"),
        (flag_int(1, 8), "9", "must be in 1..8, got 9"),
        (flag_int(0), "2.5", "must be an integer, got '2.5'"),
        (flag_number(0, low_open=True), "0", "must be a finite number > 0, got 0.0"),
        (flag_number(0), "inf", "must be a finite number >= 0, got inf"),
        (flag_number(0), "ten", "must be a number, got 'ten'"),
    ],
)
def test_flag_types_refuse_with_the_checks_message(parse, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as error:
        parse(text)
    assert str(error.value) == message


def test_flag_types_return_the_parsed_value() -> None:
    assert flag_int(1)("3") == 3 and isinstance(flag_int(1)("3"), int)
    assert flag_number(0, low_open=True)("1e-3") == 1e-3
