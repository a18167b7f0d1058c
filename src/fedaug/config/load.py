"""YAML presets + ``--set`` overrides -> a validated :class:`ExperimentConfig`.

Rules: files are deep-merged in order (a file may name a parent with ``extends: other.yaml``), then every
``--set key.path=value`` is applied (values parsed as YAML by :mod:`fedaug.config.yamlio`, so ``0.1`` and
``1e-3``
are floats and ``null`` is None; ``--set method=flea`` is short for ``method.name=flea``). Unknown keys and
wrong types are rejected with a message naming the key, the value and the valid choices.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from fedaug.config import tree as tree_module
from fedaug.config.identity import format_suffix
from fedaug.config.limits import check_limits
from fedaug.config.schema import ExperimentConfig
from fedaug.config.tree import OPEN_SECTIONS, apply_override, deep_merge
from fedaug.errors import ConfigError, shown

T = TypeVar("T")


def read_yaml(path: str | Path) -> dict[str, Any]:
    """:func:`fedaug.config.tree.read_yaml`, a file's ``extends:`` parent merged by :func:`merge_layer`.

    Raises:
        ConfigError: a missing, non-UTF-8 or malformed file (one line naming file, line and column), a file
            that is not a mapping, or an ``extends:`` cycle (naming its files).
    """
    return tree_module.read_yaml(path, merge=merge_layer)


def load_config(paths: Sequence[str | Path] = (), overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Builds an :class:`ExperimentConfig` from the defaults, YAML files and overrides, in that order.

    When a layer renames the dataset, partitioner, model or method, the options of the previous one are
    dropped (``--set partition.name=dirichlet`` does not keep quantity's ``classes_per_client``).
    """
    return config_from_dict(_overridden(_preset_tree(paths), overrides))


def _preset_tree(paths: Sequence[str | Path]) -> dict[str, Any]:
    tree = config_to_dict(ExperimentConfig())
    for path in paths:
        tree = merge_layer(tree, read_yaml(path))
    return tree


def _overridden(tree: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    for override in overrides:
        tree = merge_layer(tree, apply_override({}, override))
    return tree


SMOKE_OVERRIDES = ("train.rounds=2", "train.local_epochs=1")
"""``--smoke``: the presets shrunk to a check that everything is wired (2 rounds, 1 local epoch)."""

SMOKE_TAG = "-smoke"
"""Appended to the name of a ``--smoke`` run: its run dir is never the presets' own."""

LENGTH_KEYS = ("train.rounds", "train.local_epochs")
"""The keys whose command-line override puts a run in a run dir of its own (:func:`load_run_config`)."""


def load_run_config(
    paths: Sequence[str | Path] = (), overrides: Sequence[str] = (), *, smoke: bool = False, tag: str = ""
) -> ExperimentConfig:
    """:func:`load_config` for a command line: a shortened (or lengthened) run gets a run dir of its own.

    ``smoke`` applies :data:`SMOKE_OVERRIDES` first and appends ``-smoke`` to the name; ``tag`` is appended
    next (``-flower``). When ``overrides`` leave ``train.rounds`` or ``train.local_epochs`` at another value
    than the presets (with ``smoke``: the smoke presets) give, the name gets a last segment in a sweep's
    format, e.g. ``default/train.rounds=3``: a run dir holds one run length, so a quick check never meets
    the presets' own run (which a different config in its run dir would refuse, or ``--fresh`` would wipe).
    A run at its presets' own length keeps the name they give (``fedaug run RUN_DIR/config.yaml`` resumes a
    run in its own run dir: its presets are its config).
    """
    reference = _overridden(_preset_tree(paths), SMOKE_OVERRIDES if smoke else ())
    if smoke:  # the presets' kept checkpoints of later rounds (Fed-ZDA's [79]) do not exist in 2 rounds
        engine = reference["engine"]
        kept = [r for r in engine.get("keep_checkpoints") or [] if not isinstance(r, int) or r <= 2]
        reference = {**reference, "engine": {**engine, "keep_checkpoints": kept}}
    config = config_from_dict(_overridden(reference, overrides))
    given = config_to_dict(config)
    changed = [
        (key, str(given[section][field]))
        for key in LENGTH_KEYS
        for section, field in [key.split(".")]
        if given[section][field] != reference.get(section, {}).get(field)
    ]
    name = config.name + (SMOKE_TAG if smoke else "") + tag
    if changed:
        name = f"{name}/{format_suffix(changed)}"
    return dataclasses.replace(config, name=name) if name != config.name else config


def check_sweep_overrides(path: str | Path, overrides: Sequence[str], *, smoke: bool = False) -> None:
    """Raises the ConfigError that ``overrides`` (a sweep's ``--set``) give the base of the sweep file
    ``path`` (its ``grid:`` left out), so that a bad key or value is refused before a sweep imports torch.
    A base that does not load on its own (a value only its grid completes) is left to the sweep's own
    checks of every point, which see the same overrides.

    Raises:
        ConfigError: as :func:`load_config`, for a file that cannot be read or an override that cannot be
            parsed, names no key or gives a key a wrong value.
    """
    layer = read_yaml(path)
    layer.pop("grid", None)
    tree = merge_layer(config_to_dict(ExperimentConfig()), layer)
    if smoke:
        tree = _overridden(tree, SMOKE_OVERRIDES)
    parsed = [apply_override({}, override) for override in overrides]  # malformed: refused first
    try:
        config_from_dict(tree)
    except ConfigError:
        return
    for override in parsed:
        tree = merge_layer(tree, override)
    config_from_dict(tree)


def merge_layer(tree: Mapping[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    """``deep_merge`` that resets an open section's options when the layer changes its ``name``."""
    tree = dict(tree)
    for section in OPEN_SECTIONS:
        new = layer.get(section)
        old = tree.get(section)
        if (
            isinstance(new, Mapping)
            and isinstance(old, Mapping)
            and new.get("name", old.get("name")) != old.get("name")
        ):
            fields = {f.name for f in dataclasses.fields(_SECTION_CLASSES[section])}
            tree[section] = {k: v for k, v in old.items() if k in fields and k != "options"}
    partition = layer.get("partition")
    if isinstance(partition, Mapping) and isinstance(tree.get("partition"), Mapping):
        # K is given either directly or by the mean local size: setting one clears the other.
        for key, other in (("num_clients", "mean_local_size"), ("mean_local_size", "num_clients")):
            if partition.get(key) is not None and other not in partition:
                tree["partition"] = {**tree["partition"], other: None}
    return deep_merge(tree, layer)


def config_from_dict(tree: Mapping[str, Any]) -> ExperimentConfig:
    """Validates a nested mapping into an :class:`ExperimentConfig`."""
    tree = dict(tree)
    for section in OPEN_SECTIONS:
        if section in tree:
            tree[section] = _fold_options(section, tree[section])
    config = build_dataclass(ExperimentConfig, tree, path="")
    check_limits(config)
    return config


def _fold_options(section: str, values: Any) -> dict[str, Any]:
    if not isinstance(values, Mapping):
        raise ConfigError(f"{section} must be a mapping, got {shown(values)}")
    fields = {f.name for f in dataclasses.fields(_SECTION_CLASSES[section])} - {"options"}
    fixed = {k: v for k, v in values.items() if k in fields}
    options = dict(values.get("options") or {})
    options.update({k: v for k, v in values.items() if k not in fields and k != "options"})
    return {**fixed, "options": options}


def build_dataclass(cls: type[T], values: Mapping[str, Any], *, path: str) -> T:
    """Builds dataclass ``cls`` from ``values``; rejects unknown keys and values of the wrong type."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{path or 'config'} must be a mapping, got {shown(values)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in fields:
            hint = " (a sweep file has a grid: run it with fedaug sweep)" if where == "grid" else ""
            keys = ", ".join(sorted(fields)) or "none"
            raise ConfigError(f"unknown config key {shown(where)}; valid keys: {keys}{hint}")
        kwargs[key] = _coerce(hints[key], value, where)
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return build_dataclass(hint, value, path=where)
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        errors = []
        arms = [a for a in args if a is not type(None)]
        for arg in arms:
            try:
                return _coerce(arg, value, where)
            except ConfigError as exc:
                errors.append(str(exc))
        if len(arms) > 1 and all(isinstance(a, type) for a in arms):  # bool | str: name every type
            names = " or ".join(a.__name__ for a in arms)
            raise ConfigError(f"{where} must be of type {names}, got {shown(value)} ({type(value).__name__})")
        raise ConfigError(errors[0])
    if origin in (dict, Mapping) or hint is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping, got {shown(value)}")
        return dict(value)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list, got {shown(value)}")
        items = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if len(items) == 1:  # list[T], tuple[T, ...]: every item a T (checked; kept as given)
            for index, item in enumerate(value):
                _coerce(items[0], item, f"{where}[{index}]")
        return origin(value)
    return _coerce_scalar(hint, value, where)


def _coerce_scalar(hint: Any, value: Any, where: str) -> Any:
    if hint is Any:
        return value
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is bool and isinstance(value, bool):
        return value
    if hint is str and isinstance(value, str):
        return value
    expected = getattr(hint, "__name__", str(hint))
    raise ConfigError(f"{where} must be of type {expected}, got {shown(value)} ({type(value).__name__})")


def config_to_dict(config: Any) -> dict[str, Any]:
    """The config as a plain nested dict, with open sections' options folded back in (as in YAML)."""
    tree = dataclasses.asdict(config)
    for section in OPEN_SECTIONS:
        if section in tree:
            options = tree[section].pop("options")
            tree[section].update(options)
    return tree


def dump_yaml(config: ExperimentConfig) -> str:
    """The fully resolved config as YAML (written as ``config.yaml`` in every run dir)."""
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)


def _section_classes() -> dict[str, type]:
    hints = typing.get_type_hints(ExperimentConfig)
    return {section: hints[section] for section in OPEN_SECTIONS}


_SECTION_CLASSES = _section_classes()
