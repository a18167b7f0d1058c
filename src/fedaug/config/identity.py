"""What identifies a run: where its run dir is, and which config keys change its results.

A run dir is ``out_dir/name/<dataset>-<partition>/<method>/seed<k>`` (:func:`run_dir_for`); a sweep appends
the grid values its path does not show to ``name`` as a last segment ``key=value,...``
(:func:`format_suffix`), and a run that branches finds its FedAvg sibling by dropping the ``method.*`` ones
(:func:`fedavg_run_dir`).

A run dir is resumed, branched from, de-duplicated in a sweep and grouped into a table column by its config
*without* the keys that do not change results (:func:`result_config`): where the run dir is (``name``,
``out_dir``), which comparisons a run reports (``compare``), where the data files are read from
(``data.data_dir``: ``data.name`` says which dataset), where user code is imported from (``plugins``:
``data.name``, ``model.name`` and ``method.name`` say what it registered), which experiment trackers it
writes for (``tracking``), which paper's model the model stands in for in reports (``model.stand_in_for``)
and the engine's settings, which
change speed, not numbers (tested by the engine's determinism tests), except ``engine.precision`` (bf16
autocast changes the numbers) and ``engine.flush_denormals`` (subnormals become 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fedaug.config.schema import ExperimentConfig, MethodSpec
from fedaug.errors import ConfigError

NEUTRAL_KEYS = ("name", "out_dir", "compare", "data.data_dir", "plugins", "tracking", "model.stand_in_for")
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


def format_suffix(items: Iterable[tuple[str, str]]) -> str:
    """``key=value,...`` of ``(key, value)`` pairs ('' for none): the name segment of a sweep's grid values
    (:func:`fedaug.sweeps.sweep.name_suffix`) or of a shortened run (:mod:`fedaug.config.load`)."""
    return ",".join(f"{key}={value}" for key, value in items)


def parse_suffix(segment: str) -> list[tuple[str, str]] | None:
    """The ``(key, value)`` pairs of a segment written by :func:`format_suffix`; None if it is not one."""
    items = segment.split(",")
    if not all("=" in item for item in items):
        return None
    return [(key, value) for key, _, value in (item.partition("=") for item in items)]


def partition_tag(config: ExperimentConfig) -> str:
    """A short name of the partition, e.g. ``quantity2-K75`` or ``dirichlet0.3-K75`` (``-pseed0`` added when
    ``partition.seed`` fixes the partition's seed)."""
    part = config.partition
    params = "_".join(str(v) for v in part.options.values())
    size = f"K{part.num_clients}" if part.num_clients is not None else f"n{part.mean_local_size:g}"
    fixed = "" if part.seed is None else f"-pseed{part.seed}"
    return f"{part.name}{params}-{size}{fixed}"


def run_dir_for(config: ExperimentConfig) -> Path:
    """``out_dir/name/<dataset>-<partition>/<method>/seed<k>``.

    Raises:
        ConfigError: when the name, dataset, partition or method would put the run dir outside ``out_dir``
            (an absolute part or a ``..`` segment).
    """
    setting = f"{config.data.name}-{partition_tag(config)}"
    relative = Path(config.name) / setting / config.method.name / f"seed{config.seed}"
    if relative.is_absolute() or ".." in relative.parts or "\0" in str(relative):
        raise ConfigError(
            f"the run dir {str(relative)!r} (name/dataset-partition/method/seed) must stay inside out_dir "
            f"{config.out_dir!r}: no '..' segment or absolute part"
        )
    return Path(config.out_dir) / relative


def fedavg_name(name: str) -> str:
    """The experiment name of the FedAvg run a sweep point of ``name`` branches from.

    A sweep appends its non-path grid values to the name as a last segment ``key=value,...``
    (``default/method.variant=shared_features``); FedAvg has none of the ``method.*`` ones, so they are
    dropped (and the segment with them when nothing else is left).
    """
    head, _, last = name.rpartition("/")
    items = parse_suffix(last)
    if not head or items is None:
        return name
    kept = [(key, value) for key, value in items if not key.startswith("method.")]
    return f"{head}/{format_suffix(kept)}" if kept else head


def fedavg_run_dir(config: ExperimentConfig) -> Path:
    """The run dir of the FedAvg run that ``config`` branches from (``engine.branch_from_fedavg``): the
    sibling run dir of the same name (:func:`fedavg_name`), setting and seed."""
    return run_dir_for(replace(config, name=fedavg_name(config.name), method=MethodSpec(name="fedavg")))
