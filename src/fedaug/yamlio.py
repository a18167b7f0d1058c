"""The one YAML reader of fedaug: configs (and their ``extends:``), sweeps, ``--set`` and ``--grid`` values,
saved run configs and ``report --reference`` files.

* Safe loading only: no Python object tags (``!!python/...`` is an error, never code).
* YAML 1.2 numbers: ``1e-9``, ``1e-3``, ``-2e5`` and ``1.5e3`` are floats (PyYAML's YAML 1.1 resolver reads
  exponent floats without a dot or without an exponent sign as strings).
* A key given twice in one mapping is an error (PyYAML keeps the last one silently).
* Every error is one line (a :class:`~fedaug.errors.ConfigError`) naming the file (or the ``--set`` value),
  line and column; a file that is not UTF-8 is refused naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from fedaug.errors import ConfigError, PathError, path_error

_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
"""Floats with an exponent that YAML 1.1 misses: ``1e-9``, ``2E5``, ``1.5e3`` (no dot or no exponent sign)."""


class Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with YAML 1.2 exponent floats and duplicate keys refused."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found the key {key_node.value!r} twice",
                        key_node.start_mark,
                    )
                seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


# Checked after YAML 1.1's resolvers, which do not match these values (they would be strings).
Loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))


def parse_yaml(text: str, source: str) -> Any:
    """``text`` parsed as YAML (safe, YAML 1.2 floats); ``source`` names it in errors (a path, ``--set x``).

    Raises:
        ConfigError: one line ``malformed YAML in SOURCE, line L, column C: problem``.
    """
    try:
        return yaml.load(text, Loader=Loader)  # Loader is a SafeLoader subclass: no Python tags
    except yaml.reader.ReaderError as exc:  # a control character: it has an offset, not a line
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise ConfigError(
            f"malformed YAML in {source}, line {line}, column {column}: "
            f"character #x{exc.character if isinstance(exc.character, int) else ord(exc.character):04x} "
            "is not allowed"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_error_line(exc, source)) from None
    except RecursionError:
        raise ConfigError(f"malformed YAML in {source}: nested too deeply") from None


def yaml_error_line(exc: yaml.YAMLError, source: str) -> str:
    """One line describing a PyYAML error: where (source, line, column) and what."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = source if mark is None else f"{source}, line {mark.line + 1}, column {mark.column + 1}"
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem is None:
        text = str(exc)
    elif context:
        text = f"{context}: {problem}"
    else:
        text = problem
    return f"malformed YAML in {where}: {' '.join(text.split())}"


def read_text(path: Path, what: str = "file") -> str:
    """The UTF-8 text of ``path`` (a BOM is dropped).

    Raises:
        ConfigError: it does not exist, or is not UTF-8 (naming the file and the first bad byte).
        PathError: it is a folder or cannot be read (permission).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what} {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise PathError(f"{what} {path} is a folder, not a file") from None
    except OSError as exc:
        raise path_error(exc, path, "read") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None


def read_yaml_file(path: str | Path, what: str = "file") -> Any:
    """The YAML document in ``path`` (see :func:`read_text` and :func:`parse_yaml` for the errors)."""
    path = Path(path)
    return parse_yaml(read_text(path, what), str(path))
