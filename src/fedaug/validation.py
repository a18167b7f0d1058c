"""The one way fedaug checks a value a user supplied (config fields, method and dataset options, flags).

Every check takes ``key``, the value's name as the user wrote it (``train.lr``, ``method.mix_beta``,
``option 'n_mels' of dataset 'fsdd'``, ``--workers``), and raises one error whose message has one shape:
``<key> must be <what is valid>, got <value>``. Errors are :class:`~fedaug.errors.ConfigError` unless the
caller names another class (partitioners raise :class:`~fedaug.errors.PartitionError`).

* :func:`check_choice`: one of a fixed set;
* :func:`check_number`: a finite real number in a range (numpy scalars count; a bool is not a number; NaN
  and inf are refused);
* :func:`check_int`: an integer (not a bool) at least ``low`` and at most ``high``;
* :func:`check_bool`: true or false;
* :func:`flag_int`, :func:`flag_number`: the same checks as an argparse ``type``, so that a command-line
  flag is refused while its arguments are parsed (``argument --epochs: must be >= 1, got 0``), before any
  data or checkpoint is loaded.

:mod:`fedaug.methods.parts.checks` applies them to the fields of a method's config dataclass.
"""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from fedaug.errors import ConfigError, FedaugError, shorten, shown


def invalid(key: str, valid: str, value: Any, error: type[FedaugError] = ConfigError) -> FedaugError:
    """The error ``<key> must be <valid>, got <value>`` (strings quoted, numbers as written)."""
    if isinstance(value, numbers.Integral) and int(value).bit_length() > 128:  # str() of it may be refused
        echoed = f"an integer of {int(value).bit_length()} bits"
    else:
        echoed = shorten(str(value)) if isinstance(value, numbers.Real) else shown(value)
    return error(f"{key} must be {valid}, got {echoed}")


def check_choice(
    key: str, value: Any, choices: Sequence[Any], *, error: type[FedaugError] = ConfigError
) -> None:
    """Raises unless ``value`` is one of ``choices`` (``True`` is not ``1``)."""
    if not any(value == c and isinstance(value, bool) == isinstance(c, bool) for c in choices):
        raise invalid(key, "one of " + ", ".join(map(str, choices)), value, error)


def number_range(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> str:
    """``> 0``, ``>= 0``, ``in (0, 1]``, ... (empty when unbounded)."""
    if math.isinf(low) and math.isinf(high):
        return ""
    if math.isinf(high):
        return f"{'>' if low_open else '>='} {low:g}"
    if math.isinf(low):
        return f"{'<' if high_open else '<='} {high:g}"
    return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def check_number(
    key: str,
    value: Any,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
    allow_none: bool = False,
    error: type[FedaugError] = ConfigError,
) -> None:
    """Raises unless ``value`` is a finite int or float in ``[low, high]`` (``(`` / ``)`` where open; an
    infinite bound is no bound), or None where ``allow_none``."""
    if value is None and allow_none:
        return
    is_number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if is_number and math.isfinite(value):
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if above and below:
            return
    span = number_range(low, high, low_open=low_open, high_open=high_open)
    valid = f"a finite number {span}".rstrip() + (" or null" if allow_none else "")
    raise invalid(key, valid, value, error)


def check_int(
    key: str,
    value: Any,
    low: int = 0,
    high: int | None = None,
    *,
    why: str = "",
    allow_none: bool = False,
    error: type[FedaugError] = ConfigError,
) -> None:
    """Raises unless ``value`` is an integer (not a bool) with ``low <= value <= high`` (no upper bound when
    ``high`` is None), or None where ``allow_none``; ``why`` follows the range in the message."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise invalid(key, "an integer" + (" or null" if allow_none else ""), value, error)
    if not low <= int(value) <= (high if high is not None else int(value)):
        raise invalid(key, (f">= {low}" if high is None else f"in {low}..{high}") + why, value, error)


MAX_SEED = 2**63 - 1
"""The largest seed (a signed 64-bit integer: what torch, numpy and JSON all hold)."""


def check_seed(
    key: str, value: Any, *, allow_none: bool = False, error: type[FedaugError] = ConfigError
) -> None:
    """Raises unless ``value`` is an integer seed in ``0..MAX_SEED`` (or None where ``allow_none``)."""
    check_int(key, value, 0, MAX_SEED, why=" (64-bit seeds)", allow_none=allow_none, error=error)


def check_bool(key: str, value: Any, *, error: type[FedaugError] = ConfigError) -> None:
    """Raises unless ``value`` is True or False."""
    if not isinstance(value, bool):
        raise invalid(key, "true or false", value, error)


def flag_int(low: int = 0, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: the flag's text as an integer checked as by :func:`check_int`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        _as_flag(check_int, value, low, high)
        return value

    return parse


def flag_number(
    low: float = -math.inf, high: float = math.inf, *, low_open: bool = False
) -> Callable[[str], float]:
    """An argparse ``type``: the flag's text as a finite float checked as by :func:`check_number`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        _as_flag(check_number, value, low, high, low_open=low_open)
        return value

    return parse


def _as_flag(check: Callable[..., None], value: Any, *args: Any, **kwargs: Any) -> None:
    """Raises ArgumentTypeError with ``check``'s message unless it passes ``value`` (argparse names the
    flag)."""
    try:
        check("", value, *args, **kwargs)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error).strip()) from None


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """``--device`` (default ``auto``): where an attack or ``fedaug zsdg`` computes."""
    parser.add_argument(
        "--device",
        default="auto",
        help="where to compute: auto (default: cuda if torch sees a GPU, else cpu), cpu, cuda or cuda:N",
    )
