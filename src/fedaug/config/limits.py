"""Limits on a whole config, checked in one pass when it is loaded (:func:`check_limits`), before any data is
read or any file written: every value is bounded by what it is, not only by its type.

* seeds within what the run's random generators take (:data:`MAX_SEED`:
:func:`fedaug.runtime.seeding.seed_for` reads
  64 bits, so a larger seed would silently repeat a smaller one's run);
* learning rates, ``lr_min`` and ``weight_decay`` finite in float32 (the precision they are used in) and a
  positive ``lr`` that is not 0 there;
* names (``name``, ``out_dir``, ``data.data_dir``, the dataset, partitioner, model and method) not empty and
  without control characters; component names without path characters; every segment of the run dir's path
  within the file system's limit (:data:`NAME_MAX` bytes);
* ``engine.keep_checkpoints`` within the run's rounds and without repeats; ``compare`` without repeats.

Each failure is one :class:`~fedaug.errors.ConfigError` naming the key, the bad value (cut to a readable
length) and what is valid.
"""

from __future__ import annotations

import struct
import unicodedata
from typing import TYPE_CHECKING

from fedaug.errors import ConfigError, shown
from fedaug.validation import MAX_SEED, check_int, check_seed, invalid

if TYPE_CHECKING:
    from fedaug.config.schema import ExperimentConfig


FLOAT32_MAX: float = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
"""The largest finite float32 (read from its bits: the config is checked without numpy or torch)."""

NAME_MAX = 255
"""The longest file or folder name (bytes) most file systems take."""


def _has_control(text: str) -> bool:
    return any(unicodedata.category(char) == "Cc" for char in text)


def check_name(key: str, value: str | None, *, path: bool) -> None:
    """Raises unless ``value`` (None passes) is a non-empty string without control characters and, unless
    ``path``, without ``/`` or ``\\``."""
    if value is None:
        return
    if not value.strip():
        raise invalid(key, "a non-empty name", value)
    if _has_control(value):
        raise invalid(key, "free of control characters (tabs, newlines, escapes)", value)
    if not path and ("/" in value or "\\" in value or value in (".", "..")):
        raise invalid(key, "a name without path characters ('/', '\\\\', '.', '..')", value)


def check_float32(key: str, value: float, *, positive: bool = False) -> None:
    """Raises unless ``value`` is finite in float32 (and, with ``positive``, not 0 there)."""
    if abs(value) > FLOAT32_MAX:
        raise invalid(key, f"finite in float32 (at most {FLOAT32_MAX:.4g})", value)
    if positive and _as_float32(value) == 0:
        raise invalid(key, "a number that is not 0 in float32 (at least 1.4e-45)", value)


def _as_float32(value: float) -> float:
    """``value`` rounded to the nearest float32, as numpy rounds it (``abs(value) <= FLOAT32_MAX``)."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


def check_path_segments(config: ExperimentConfig) -> None:
    """Raises unless every folder name of the run dir below ``out_dir`` fits in :data:`NAME_MAX` bytes."""
    from fedaug.config.identity import run_dir_for

    relative = run_dir_for(config).relative_to(config.out_dir)
    for part in relative.parts:
        if len(part.encode()) > NAME_MAX:
            raise ConfigError(
                f"the run dir's folder name {shown(part)} is {len(part.encode())} bytes long, more than the "
                f"{NAME_MAX} a file system takes; shorten the name, method or options that make it"
            )


def check_limits(config: ExperimentConfig) -> None:
    """Every limit above on ``config`` (after its sections have checked their own fields' types and ranges).

    Raises:
        ConfigError: the first value out of its limit.
    """
    check_int("seed", config.seed, 0, MAX_SEED, why=" (64-bit seeds)")
    check_int("partition.seed", config.partition.seed, 0, MAX_SEED, allow_none=True)
    for key, value in config.data.options.items():  # a dataset's seed options (seed, split_seed, ...)
        if (
            (key == "seed" or key.endswith("_seed"))
            and isinstance(value, int)
            and not isinstance(value, bool)
        ):
            check_seed(f"data.{key}", value)
    train = config.train
    check_float32("train.lr", train.lr, positive=True)
    check_float32("train.lr_min", train.lr_min)
    check_float32("train.weight_decay", train.weight_decay)
    check_name("name", config.name, path=True)
    check_name("out_dir", config.out_dir, path=True)
    check_name("data.data_dir", config.data.data_dir, path=True)
    check_name("engine.device", config.engine.device, path=False)
    for key, name in (
        ("data.name", config.data.name),
        ("partition.name", config.partition.name),
        ("model.name", config.model.name),
        ("method.name", config.method.name),
    ):
        check_name(key, name, path=False)
    for method in config.compare:
        check_name("compare", str(method), path=False)
    repeated = sorted({str(m) for m in config.compare if config.compare.count(m) > 1})
    if repeated:
        listed = ", ".join(repeated)
        raise ConfigError(
            f"compare lists {listed} more than once, got {shown(config.compare)}; list each once"
        )
    kept = config.engine.keep_checkpoints
    beyond = [r for r in kept if r > train.rounds]
    if beyond or len(set(kept)) != len(kept):
        raise ConfigError(
            f"engine.keep_checkpoints must list distinct rounds in 1..{train.rounds} (train.rounds), got "
            f"{shown(kept)}"
        )
    check_path_segments(config)
