"""Which config keys change a run's results: one rule for resuming, branching, sweeps and result tables.

A run dir is resumed, branched from, de-duplicated in a sweep and grouped into a table column by its config
*without* the keys below: where the run dir is (``name``, ``out_dir``), which comparisons a run reports
(``compare``), where the data files are read from (``data.data_dir``: ``data.name`` says which dataset)
and the engine's settings, which change speed, not numbers (tested by the engine's determinism tests), except
``engine.precision`` (bf16 autocast changes the numbers) and ``engine.flush_denormals`` (subnormals become 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NEUTRAL_KEYS = ("name", "out_dir", "compare", "data.data_dir")
"""Dotted config keys that never change a run's results (nor does ``engine.*``: :func:`changes_results`)."""

RESULT_ENGINE_KEYS = ("engine.precision", "engine.flush_denormals")
"""The ``engine.*`` keys that do change results."""


def changes_results(key: str) -> bool:
    """Whether the dotted config key ``key`` can change a run's results."""
    if key in NEUTRAL_KEYS or key.startswith(tuple(f"{k}." for k in NEUTRAL_KEYS)):
        return False
    return not key.startswith("engine.") or key in RESULT_ENGINE_KEYS


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as ``{"a.b.c": value}`` (lists and empty mappings stay values)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def result_config(tree: Mapping[str, Any]) -> dict[str, Any]:
    """The flat config (``{"a.b": value}``) of ``tree`` without the keys that do not change results."""
    return {k: v for k, v in flatten(tree).items() if changes_results(k)}
