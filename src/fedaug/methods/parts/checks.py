"""The :mod:`fedaug.validation` checks applied to fields of a method's config dataclass.

Each names the field as the user writes it (``method.<field>``), the valid values and the value given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fedaug import validation


def check_choice(field: str, value: Any, choices: Sequence[Any]) -> None:
    """Raises ConfigError unless ``value`` is one of ``choices``."""
    validation.check_choice(f"method.{field}", value, choices)


def check_at_least(config: object, fields: Sequence[str], minimum: int) -> None:
    """Raises ConfigError naming the first of ``fields`` that is not an integer >= ``minimum``."""
    for field in fields:
        validation.check_int(f"method.{field}", getattr(config, field), minimum)


def check_nonnegative(config: object, fields: Sequence[str]) -> None:
    """Raises ConfigError naming the first of ``fields`` that is not a finite number >= 0."""
    check_in_range(config, fields, 0, math.inf)


def check_positive(config: object, fields: Sequence[str]) -> None:
    """Raises ConfigError naming the first of ``fields`` that is not a finite number > 0."""
    check_in_range(config, fields, 0, math.inf, low_open=True)


def check_in_range(
    config: object,
    fields: Sequence[str],
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
    allow_none: bool = False,
) -> None:
    """Raises ConfigError naming the first of ``fields`` that is not a finite number in ``[low, high]``
    (``(`` / ``)`` where open; an infinite bound is no bound), or None where ``allow_none``."""
    for field in fields:
        validation.check_number(
            f"method.{field}",
            getattr(config, field),
            low,
            high,
            low_open=low_open,
            high_open=high_open,
            allow_none=allow_none,
        )
