"""Validation helpers for method configs (errors name the field, the value and the valid choices)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fedaug.errors import ConfigError


def check_choice(field: str, value: Any, choices: Sequence[Any]) -> None:
    """Raises ConfigError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"method.{field} must be one of {', '.join(map(str, choices))}, got {value!r}")


def check_at_least(config: object, fields: Sequence[str], minimum: int) -> None:
    """Raises ConfigError naming the first of ``fields`` whose value is below ``minimum``."""
    for field in fields:
        value = getattr(config, field)
        if value < minimum:
            raise ConfigError(f"method.{field} must be >= {minimum}, got {value}")


def check_nonnegative(config: object, fields: Sequence[str]) -> None:
    """Raises ConfigError naming the first of ``fields`` that is not a finite number >= 0."""
    _check_finite(config, fields, allow_zero=True)


def check_positive(config: object, fields: Sequence[str]) -> None:
    """Raises ConfigError naming the first of ``fields`` that is not a finite number > 0."""
    _check_finite(config, fields, allow_zero=False)


def check_in_range(
    config: object,
    fields: Sequence[str],
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raises ConfigError naming the first of ``fields`` outside ``[low, high]`` (``(`` / ``)`` where open;
    NaN is outside)."""
    for field in fields:
        value = getattr(config, field)
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if not (above and below):
            interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            raise ConfigError(f"method.{field} must be in {interval}, got {value}")


def _check_finite(config: object, fields: Sequence[str], *, allow_zero: bool) -> None:
    for field in fields:
        value = getattr(config, field)
        if not (math.isfinite(value) and (value >= 0 if allow_zero else value > 0)):
            raise ConfigError(
                f"method.{field} must be a finite number {'>=' if allow_zero else '>'} 0, got {value}"
            )
