"""Archived files without the paths of the machine that wrote them.

A run dir's ``config.yaml`` names where its runs and data were (``out_dir``, ``data.data_dir``), its
``env.json`` where the dataset was read from (``dataset_source``), and benchmark and sweep logs name configs,
data folders and temporary run dirs. Committed, those absolute paths say nothing on another machine and leak
this one's layout. :func:`portable_text` rewrites them: the two config keys that never change results
(:data:`fedaug.config.identity.NEUTRAL_KEYS`) are dropped from a ``config.yaml`` (the loader gives
them their defaults), and every other absolute path becomes

- ``<data_dir>/rest`` when it runs through a ``data`` folder (``/home/u/shared/data/fsdd/x.tar.xz``,
  ``~/.cache/fedaug/data/uci_har``),
- the path relative to the repository when it runs through one of the repository's top folders
  (``/home/u/fedaug/configs/default.yaml`` -> ``configs/default.yaml``),
- ``<runs>/rest`` when it runs through a folder of runs (``runs``, ``*_runs``),
- ``<abs>/name`` (its last component) otherwise.

:func:`absolute_paths` finds what is left; a unit test runs it over every archived file.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable
from pathlib import Path

ABSOLUTE = re.compile(r"(?<![\w.~:/<>$%-])/(?:[\w.+@-]+/)*[\w.+@-]+/?")
"""An absolute POSIX path that is not part of a relative path, a URL or a placeholder like ``<runs>/x``."""

REPOSITORY_TOPS = ("benchmarks", "configs", "docs", "scripts", "src", "studies", "tests")
"""Top-level folders of the repository: a path through one is written relative to the repository."""

_CONFIG_DROPPED = re.compile(r"^(?:out_dir|  data_dir): /.*\n", re.MULTILINE)
"""``out_dir`` (top level) and ``data.data_dir`` (indented under ``data:``) holding an absolute path."""

ARCHIVE_SUFFIXES = (".json", ".jsonl", ".yaml", ".yml", ".log", ".csv", ".md", ".tex", ".txt", ".gz")
"""Files :func:`portable_file` rewrites; the others (images, scripts) are left alone."""


def _portable_path(path: str) -> str:
    trailing = "/" if path.endswith("/") and len(path) > 1 else ""
    parts = [p for p in path.split("/") if p]
    if "data" in parts:
        rest = parts[len(parts) - parts[::-1].index("data") :]
        return "/".join(["<data_dir>", *rest]) + trailing
    tops = [i for i, p in enumerate(parts) if p in REPOSITORY_TOPS]
    if tops and tops[0] > 0:
        return "/".join(parts[tops[0] :]) + trailing
    runs = [i for i, p in enumerate(parts) if p == "runs" or p.endswith("_runs")]
    if runs:
        return "/".join(["<runs>", *parts[runs[0] + 1 :]]) + trailing
    return "/".join(["<abs>", *parts[-1:]]) + trailing


def portable_text(text: str, *, config: bool = False) -> str:
    """``text`` with its absolute paths rewritten (see the module); ``config``: a run's ``config.yaml``,
    whose ``out_dir`` and ``data.data_dir`` lines are dropped. Idempotent."""
    if config:
        text = _CONFIG_DROPPED.sub("", text)
    return ABSOLUTE.sub(lambda m: _portable_path(m.group(0)), text)


def absolute_paths(text: str) -> list[str]:
    """The absolute paths :func:`portable_text` would rewrite in ``text``."""
    return ABSOLUTE.findall(text)


def archive_files(paths: Iterable[Path]) -> list[Path]:
    """The archive files among ``paths``: those :func:`portable_file` rewrites, study READMEs excepted."""
    return [p for p in paths if p.suffix in ARCHIVE_SUFFIXES and p.name != "README.md" and p.is_file()]


def read_text(path: Path) -> str:
    """The text of ``path``, gunzipped when its name ends in ``.gz``."""
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode()


def portable_file(path: Path) -> bool:
    """Rewrites ``path`` in place with :func:`portable_text` (a ``.gz`` file stays gzip, with no time or
    name in its header); returns whether it changed. Files with other suffixes than
    :data:`ARCHIVE_SUFFIXES` are left alone."""
    if path.suffix not in ARCHIVE_SUFFIXES:
        return False
    text = read_text(path)
    new = portable_text(text, config=path.name == "config.yaml")
    if new == text:
        return False
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(new.encode(), compresslevel=9, mtime=0))
    else:
        path.write_text(new)
    return True
