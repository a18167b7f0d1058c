"""Validation of user-supplied partitioner parameters against the partitioner's signature (private)."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedaug.errors import ConfigError

# Arguments make_partition supplies itself; a user may not pass them as partitioner params.
RESERVED = frozenset({"labels", "num_clients", "num_classes", "rng", "groups"})


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the (simple) type hint ``hint``: int, float, bool, str, unions, None."""
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # an int is a valid float, a bool is not
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, origin or hint)


def _hint_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("NoneType", "None")


def resolve_params(name: str, fn: Callable[..., Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """Checks ``params`` against ``fn``'s keyword parameters and fills in the defaults.

    Args:
        name: Registry name of the partitioner (for messages).
        fn: The partitioner function.
        params: User parameters, e.g. ``{"alpha": 0.3}``.

    Returns:
        All of the partitioner's own parameters, with defaults for the ones not given, in signature order.

    Raises:
        ConfigError: On an unknown or missing parameter or a value of the wrong type.
    """
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    own = {key: p for key, p in signature.parameters.items() if key not in RESERVED}
    valid = ", ".join(own) or "none"
    for key in params:
        if key not in own:
            raise ConfigError(
                f"unknown parameter {key!r} for partitioner {name!r}; valid parameters: {valid}"
            )
    resolved: dict[str, Any] = {}
    for key, parameter in own.items():
        if key in params:
            value = params[key]
            if isinstance(value, np.generic):  # numpy scalars count as the matching Python type
                value = value.item()
            if key in hints and not _matches(value, hints[key]):
                raise ConfigError(
                    f"parameter {key!r} of partitioner {name!r} must be {_hint_name(hints[key])}, "
                    f"got {value!r} ({type(value).__name__})"
                )
            resolved[key] = value
        elif parameter.default is inspect.Parameter.empty:
            raise ConfigError(f"partitioner {name!r} needs parameter {key!r}; valid parameters: {valid}")
        else:
            resolved[key] = parameter.default
    return resolved
