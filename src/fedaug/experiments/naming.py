"""The last name segment a sweep appends for grid values its run dirs do not show: ``key=value,...``.

One format, written by :func:`fedaug.experiments.sweep.name_suffix` and read back by
:func:`fedaug.experiments.branching.fedavg_name` (a sweep point's FedAvg sibling drops its ``method.*``
items).
"""

from __future__ import annotations

from collections.abc import Iterable


def format_suffix(items: Iterable[tuple[str, str]]) -> str:
    """``key=value,...`` of ``(key, value)`` pairs ('' for none)."""
    return ",".join(f"{key}={value}" for key, value in items)


def parse_suffix(segment: str) -> list[tuple[str, str]] | None:
    """The ``(key, value)`` pairs of a segment written by :func:`format_suffix`; None if it is not one."""
    items = segment.split(",")
    if not all("=" in item for item in items):
        return None
    return [(key, value) for key, _, value in (item.partition("=") for item in items)]
