"""The one YAML reader of fedaug: configs (and their ``extends:``), sweeps, ``--set`` and ``--grid`` values,
saved run configs and ``report --reference`` files.

* Safe loading only: no Python object tags (``!!python/...`` is an error, never code).
* YAML 1.2 numbers: ``1e-9``, ``1e-3``, ``-2e5`` and ``1.5e3`` are floats (PyYAML's YAML 1.1 resolver reads
  exponent floats without a dot or without an exponent sign as strings).
* A key given twice in one mapping is an error (PyYAML keeps the last one silently).
* Limits: a file must be a regular file of at most :data:`MAX_FILE_BYTES` (a FIFO, a device or ``/dev/zero``
  is refused before it is read); a document may use at most :data:`MAX_ALIASES` aliases, and once its
  aliases are resolved it may hold at most :data:`MAX_EXPANDED_NODES` values and :data:`MAX_EXPANDED_TEXT`
  characters of scalars (an alias bomb under the alias count, nested aliases of aliases, expands
  exponentially: the bound is checked on the composed node graph, in time linear in the file, before any
  Python object is built). An alias inside the node it names (a recursive document) is refused too.
* Every error is one line (a :class:`~fedaug.errors.ConfigError`) naming the file (or the ``--set`` value),
  line and column; a file that is not UTF-8 is refused naming the file.
* Speed: a document that holds none of :data:`_NOT_FAST` (no anchor, alias, tag, block scalar, ``?`` key
  or tab; every saved run config) is read by libyaml's C parser (:data:`FastLoader`), with the same
  constructor, resolvers and limits, and gives the same value; any other document, and any the C parser
  fails on, is read by the pure-Python :class:`Loader`, whose errors are the ones reported. Reading the
  archived runs' configs (``campaign status``, ``python -m tools.results``) is a third faster for it.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from fedaug.errors import ConfigError, PathError, path_error, shorten

_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
"""Floats with an exponent that YAML 1.1 misses: ``1e-9``, ``2E5``, ``1.5e3`` (no dot or no exponent sign)."""


MAX_FILE_BYTES = 1 << 20
"""The largest YAML file read (1 MiB; the largest preset is a few kB)."""

MAX_ALIASES = 100
"""The most aliases (``*name``) one YAML document may use."""

MAX_EXPANDED_NODES = 100_000
"""The most values (scalars, lists and mappings) one YAML document may hold once its aliases are resolved
(the largest file fedaug ships, ``published_numbers.yaml``, holds about 1,600)."""

MAX_EXPANDED_TEXT = MAX_FILE_BYTES
"""The most characters of scalar text one YAML document may hold once its aliases are resolved (what a file
without aliases holds at most, escapes aside)."""

_Size = tuple[int, int]
"""A node's expansion: (values, characters of scalar text)."""


def _expansion_error(node: yaml.Node, problem: str) -> yaml.composer.ComposerError:
    return yaml.composer.ComposerError(None, None, problem, node.start_mark)


def _too_large(node: yaml.Node, limit: int, what: str) -> yaml.composer.ComposerError:
    return _expansion_error(
        node,
        f"the document expands to more than {limit:,} {what} (the most one may hold) once its aliases are "
        "resolved: an alias bomb?",
    )


def _expanded(node: yaml.Node, sizes: dict[int, _Size], open_nodes: set[int]) -> _Size:
    """``node``'s size with every alias expanded, each shared node sized once (``sizes``, by id).

    Raises:
        yaml.composer.ComposerError: past :data:`MAX_EXPANDED_NODES` or :data:`MAX_EXPANDED_TEXT` (at the
            first node that crosses it), or a node that contains itself.
    """
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise _expansion_error(
            node, "this node contains an alias of itself (a recursive document never ends)"
        )
    if isinstance(node, yaml.ScalarNode):
        size = (1, len(node.value))
    else:
        open_nodes.add(key)
        children = (
            node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
        )
        count, text = 1, 0
        for child in children:
            child_count, child_text = _expanded(child, sizes, open_nodes)
            count, text = count + child_count, text + child_text
            if count > MAX_EXPANDED_NODES:
                raise _too_large(node, MAX_EXPANDED_NODES, "values")
            if text > MAX_EXPANDED_TEXT:
                raise _too_large(node, MAX_EXPANDED_TEXT, "characters of text")
        open_nodes.discard(key)
        size = (count, text)
    sizes[key] = size
    return size


class _NoDuplicateKeys:
    """The mapping constructor of both loaders: a key given twice in one mapping is an error."""

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
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)  # type: ignore[misc]
        return mapping


class Loader(_NoDuplicateKeys, yaml.SafeLoader):
    """``yaml.SafeLoader`` with YAML 1.2 exponent floats, duplicate keys refused and aliases limited (in
    number and in what they expand to)."""

    def compose_document(self) -> yaml.Node | None:
        node: yaml.Node | None = super().compose_document()
        if node is not None:
            _expanded(node, {}, set())
        return node

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases = getattr(self, "_aliases", 0) + 1
            if self._aliases > MAX_ALIASES:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"more than {MAX_ALIASES} aliases (an alias bomb?)",
                    self.peek_event().start_mark,  # type: ignore[no-untyped-call]
                )
        return super().compose_node(parent, index)


# Checked after YAML 1.1's resolvers, which do not match these values (they would be strings).
Loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))

_CSafeLoader: type | None = getattr(yaml, "CSafeLoader", None)
"""PyYAML's loader on libyaml's C parser (None where PyYAML was built without it)."""

FastLoader: type | None = None
""":class:`Loader` on libyaml's C parser and composer (None without libyaml): the same constructor and
resolvers, about 7 times faster (597 archived run configs: 2.2 s against 14.8 s). It cannot count aliases
as they are composed, so :func:`parse_yaml` gives it only documents that cannot hold one (none of
:data:`_NOT_FAST` anywhere) and reads every other document, and every one it fails on, with
:class:`Loader`."""

if _CSafeLoader is not None:

    class _FastLoader(_NoDuplicateKeys, _CSafeLoader):  # type: ignore[misc, valid-type]
        def get_single_node(self) -> yaml.Node | None:
            node: yaml.Node | None = super().get_single_node()
            if node is not None:
                _expanded(node, {}, set())  # the size limits of a document without aliases
            return node

    _FastLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))
    FastLoader = _FastLoader


_NOT_FAST = ("&", "*", "\t", "!", "|", ">", "?", "\ufeff")
"""Characters that send a document to :class:`Loader`: those that start an anchor or an alias, and those
around which the two read differently (found by ``tests/unit/test_yaml_fast.py``): the tab (libyaml
accepts ``0<TAB>``), the tag mark (``!`` alone: ``''`` against ``None``), the block scalar marks (libyaml
accepts ``|#``), the complex key mark ``?`` (in flow collections) and a byte-order mark inside the text."""


def _fast_load(text: str) -> tuple[bool, Any]:
    """``(True, document)`` where :data:`FastLoader` reads ``text`` without an error; ``(False, None)`` where
    :class:`Loader` must (no libyaml, one of :data:`_NOT_FAST`, a character PyYAML refuses, or any error,
    which :class:`Loader` then reports in its own words)."""
    if (
        FastLoader is None
        or any(c in text for c in _NOT_FAST)
        or yaml.reader.Reader.NON_PRINTABLE.search(text)
    ):
        return False, None
    try:
        return True, yaml.load(text, Loader=FastLoader)  # a SafeLoader's constructor: no Python tags
    except (yaml.YAMLError, ValueError, RecursionError):
        return False, None


def parse_yaml(text: str, source: str) -> Any:
    """``text`` parsed as YAML (safe, YAML 1.2 floats); ``source`` names it in errors (a path, ``--set x``).

    Raises:
        ConfigError: one line ``malformed YAML in SOURCE, line L, column C: problem``.
    """
    done, document = _fast_load(text)
    if done:
        return document
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
    except ValueError as exc:  # an integer of more than 4300 digits, which Python refuses to convert
        raise ConfigError(f"malformed YAML in {source}: {shorten(str(exc))}") from None


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
        ConfigError: it does not exist, is not a regular file, is larger than :data:`MAX_FILE_BYTES`, or is
            not UTF-8 (naming the file and the first bad byte).
        PathError: it is a folder or cannot be read (permission, a name too long).
    """
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise PathError(f"{what} {path} is a folder, not a file")
        if not stat.S_ISREG(mode):  # a FIFO would block, /dev/zero never end
            raise ConfigError(f"{what} {path} is not a regular file (a pipe, socket or device); give a file")
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{what} {str(path)!r} does not exist") from None
    except OSError as exc:
        raise path_error(exc, path, "read") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{what} {path} is larger than {MAX_FILE_BYTES >> 20} MiB: not a config file")
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
