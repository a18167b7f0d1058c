"""Method-config validation helpers: the interval, NaN and the message that names field, value and range."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from fedaug.errors import ConfigError
from fedaug.methods.fedrs import FedRSConfig
from fedaug.methods.fedzda.method import ZDAConfig
from fedaug.methods.parts.checks import check_in_range, check_positive


@dataclass
class _Value:
    x: float


@pytest.mark.parametrize(
    ("value", "low_open", "high_open", "ok"),
    [
        (0.0, False, False, True),
        (1.0, False, False, True),
        (0.0, True, False, False),
        (1.0, False, True, False),
        (0.5, True, True, True),
        (-1e-9, False, False, False),
        (math.nan, False, False, False),
    ],
)
def test_check_in_range_interval_ends(value: float, low_open: bool, high_open: bool, ok: bool) -> None:
    call = lambda: check_in_range(_Value(value), ("x",), 0, 1, low_open=low_open, high_open=high_open)  # noqa: E731
    if ok:
        call()
        return
    interval = ("(" if low_open else "[") + "0, 1" + (")" if high_open else "]")
    message = rf"^method\.x must be a finite number in \{interval[0]}0, 1\{interval[-1]}, got "
    with pytest.raises(ConfigError, match=message):
        call()


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf])
def test_check_positive_rejects_zero_negative_and_non_finite(value: float) -> None:
    with pytest.raises(ConfigError, match=r"method\.x must be a finite number > 0"):
        check_positive(_Value(value), ("x",))


def test_method_configs_use_them() -> None:
    message = r"method\.restricted_alpha must be a finite number in \[0, 1\], got 1.5"
    with pytest.raises(ConfigError, match=message):
        FedRSConfig(restricted_alpha=1.5)
    with pytest.raises(ConfigError, match=r"method\.gen_lr must be a finite number > 0, got nan"):
        ZDAConfig(gen_lr=math.nan)
    with pytest.raises(ConfigError, match=r"method\.start_round must be >= 1, got 0"):
        ZDAConfig(start_round=0)
