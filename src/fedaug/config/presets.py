"""The YAML presets that ship inside the package (``fedaug/configs``), found by name from any directory.

A checkout's ``configs/`` is a link to the same folder, so ``fedaug run configs/smoke.yaml`` works in the
repository as it always did, and ``fedaug run smoke`` works anywhere, a wheel install included. A preset is
named by its path under ``configs/`` without ``.yaml``; the top-level and ``experiments/`` presets also by
their file name alone:

* ``default`` (the main job), ``smoke``, ``fedaugmix_mnist``, ... (``configs/*.yaml``);
* ``flea_table1_har`` or ``experiments/flea_table1_har`` (the papers' grids, ``configs/experiments``);
* ``methods/fedprox`` (a method with its paper's options, merged over another preset: ``configs/methods``).

A file that exists is always read as given; a path like ``configs/experiments/x.yaml`` that does not exist
where the command runs falls back to the packaged preset of that name.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from fedaug.errors import ConfigError
from fedaug.runtime.log_once import info_once

logger = logging.getLogger("fedaug")

PRESET_ROOT = Path(__file__).resolve().parents[1] / "configs"
"""Where the presets live in the installed package."""

DEFAULT = PRESET_ROOT / "default.yaml"
"""The main job's preset, read when a command or :func:`fedaug.script.load_config` names none."""

_BY_FILE_NAME = ("", "experiments")
"""The folders under :data:`PRESET_ROOT` whose presets may also be named by their file name alone."""

_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Preset:
    """A packaged preset: its name (``smoke``, ``flea_table1_har``, ``methods/fedprox``), file and the
    first sentence of its header comment."""

    name: str
    path: Path
    summary: str


def presets() -> list[Preset]:
    """Every packaged preset: the top-level ones, then ``experiments/``, then ``methods/``, each by name."""
    found = []
    for folder in ("", "experiments", "methods"):
        for path in sorted((PRESET_ROOT / folder).glob("*.yaml")):
            name = path.stem if folder in _BY_FILE_NAME else f"{folder}/{path.stem}"
            found.append(Preset(name, path, _summary(path)))
    return found


def _summary(path: Path, width: int = 90) -> str:
    """The first sentence of a preset's header comment, as one line of at most ``width`` characters."""
    words: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.lstrip("#").strip()
        if not line.startswith("#") or not text:
            break
        words.append(text)
    summary = " ".join(words)
    end = _SENTENCE_END.search(summary)
    summary = summary[: end.start() + 1] if end else summary
    return summary if len(summary) <= width else summary[: width - 4].rsplit(" ", 1)[0] + " ..."


_SENTENCE_END = re.compile(
    r"(?<!\bSec)(?<!\bEq)(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bFig)(?<!\bFigs)\.(?:\s|$)"
)
"""A full stop that ends a sentence: not the one of ``Sec.``, ``Eq.``, ``et al.``, ``e.g.``, ``i.e.``,
``Fig.`` or ``Figs.``."""


def find(name: str) -> Path | None:
    """The packaged preset ``name`` names, or None.

    ``name`` may be a preset's name (``smoke``, ``experiments/flea_table1_har``, ``methods/fedprox``), with or
    without ``.yaml`` and a leading ``configs/`` (a checkout's path to it).
    """
    key = name.replace("\\", "/").strip()
    key = key.removeprefix("./").removeprefix("configs/")
    for suffix in _SUFFIXES:
        key = key.removesuffix(suffix)
    if not key or key.startswith("/") or ".." in key.split("/"):
        return None
    direct = PRESET_ROOT / f"{key}.yaml"
    if direct.is_file():
        return direct
    if "/" not in key:
        for folder in _BY_FILE_NAME[1:]:
            candidate = PRESET_ROOT / folder / f"{key}.yaml"
            if candidate.is_file():
                return candidate
    return None


def locate(path: str | Path) -> Path:
    """The file a command line's CONFIG argument means: ``path`` if it is a file, else the packaged preset
    it names (logged), else an error naming it and the presets.

    Raises:
        ConfigError: ``path`` does not exist and names no preset.
    """
    given = Path(path)
    if given.is_file():
        return given
    preset = find(str(path))
    if preset is not None:
        info_once(logger, "preset %s: %s", str(path), preset)  # read again once the command runs
        return preset
    if given.exists():  # a folder: read_yaml says so
        return given
    names = ", ".join(p.name for p in presets() if not p.name.startswith("methods/"))
    raise ConfigError(
        f"config file {str(path)!r} does not exist, and no preset has that name; "
        f"presets: {names}, methods/NAME (fedaug list presets)"
    )


def has_grid(path: Path) -> bool:
    """Whether the preset is a sweep (a top-level ``grid:``): ``fedaug sweep`` runs it, not ``fedaug run``."""
    return any(line.startswith("grid:") for line in path.read_text(encoding="utf-8").splitlines())


def detail_lines(name: str) -> list[str]:
    """``fedaug list preset NAME``: where the preset is and its YAML, as the file has it.

    Raises:
        ConfigError: no preset has that name (naming the presets).
    """
    path = find(name)
    if path is None:
        names = ", ".join(p.name for p in presets())
        raise ConfigError(f"no preset is named {name!r}; presets: {names}")
    return [f"# {path}", *path.read_text(encoding="utf-8").splitlines()]
