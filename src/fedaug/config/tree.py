"""A config's layers as nested mappings, read without torch: YAML files (``extends:`` followed), ``--set``
overrides, their deep merge (:mod:`fedaug.config.load` validates the result into an ``ExperimentConfig``).

:func:`preflight` reads a command line's files and overrides as :mod:`fedaug.config.load` will, so that a
missing or malformed file or an override without ``=`` is refused before the command imports torch (seconds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedaug.config import presets
from fedaug.config.yamlio import parse_yaml, read_yaml_file
from fedaug.errors import ConfigError, shorten, shown

Merge = Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]
"""How a file is merged into the file it ``extends:``."""

OPEN_SECTIONS = ("data", "partition", "model", "method")
"""Sections whose extra keys are the named component's options (validated when it is built)."""


def read_yaml(
    path: str | Path, _chain: tuple[Path, ...] = (), *, merge: Merge | None = None
) -> dict[str, Any]:
    """Reads one YAML mapping, following ``extends:`` (relative to the file; a cycle is refused), the file
    merged into its parent by ``merge`` (:func:`deep_merge` by default; the loader resets a renamed
    section's options). ``path`` may name a packaged preset instead of a file
    (:func:`fedaug.config.presets.locate`).

    Raises:
        ConfigError: a missing, non-UTF-8 or malformed file (one line naming file, line and column), a file
            that is not a mapping, or an ``extends:`` cycle (naming its files).
    """
    path = Path(path) if _chain else presets.locate(path)
    resolved = path.resolve()
    if resolved in _chain:
        cycle = [*_chain[_chain.index(resolved) :], resolved]
        raise ConfigError(f"extends: cycle between config files: {' -> '.join(map(str, cycle))}")
    what = "config file" if not _chain else f"config file (extended by {_chain[-1]})"
    loaded = read_yaml_file(path, what)
    if loaded is None:  # an empty file would run the default preset's 100-round job without a word
        raise ConfigError(
            f"{what} {path} is empty (or only comments): give it config keys, or leave it out to run the "
            "default preset"
        )
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path} must contain a mapping of config keys, got {type(loaded).__name__}")
    parent = loaded.pop("extends", None)
    if parent is None:
        return loaded
    if not isinstance(parent, str) or not parent.strip():
        raise ConfigError(f"extends: in {path} must name a config file, got {parent!r}")
    merge = merge or deep_merge
    return merge(read_yaml(path.parent / parent, (*_chain, resolved), merge=merge), loaded)


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``update`` merged into ``base``; nested mappings merge, everything else replaces."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def apply_override(tree: dict[str, Any], override: str) -> dict[str, Any]:
    """Applies one ``key.path=value`` override to a nested dict."""
    if "=" not in override:
        raise ConfigError(f"override {shorten(override)!r} must look like key.path=value")
    key, raw = override.split("=", 1)
    parts = key.strip().split(".")
    if not key.strip():
        raise ConfigError(f"override {shorten(override)!r} has an empty key")
    if not all(part.strip() for part in parts):
        raise ConfigError(f"override {shorten(override)!r} has an empty segment in its key {key.strip()!r}")
    value = parse_yaml(raw, f"--set {shown(override)}") if raw.strip() else ""
    if len(parts) == 1 and parts[0] in OPEN_SECTIONS and not isinstance(value, dict):
        parts.append("name")
    patch: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        patch = {part: patch}
    return deep_merge(tree, patch)


def preflight(paths: Sequence[str | Path], overrides: Sequence[str]) -> None:
    """Raises the ConfigError that loading ``paths`` and ``overrides`` would raise first for a file that
    cannot be read or an override that cannot be parsed; the rest (keys, types, values) is checked by
    :func:`fedaug.config.load.load_config`."""
    for path in paths:
        read_yaml(path)
    for override in overrides:
        apply_override({}, override)
