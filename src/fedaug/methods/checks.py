"""Validation helpers for method configs (errors name the field, the value and the valid choices)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedaug.errors import ConfigError


def check_choice(field: str, value: Any, choices: Sequence[Any]) -> None:
    """Raises ConfigError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"method.{field} must be one of {', '.join(map(str, choices))}, got {value!r}")
