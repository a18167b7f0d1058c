"""The built-in registrations read from their source, without importing it (for a ``fedaug list`` that
answers without torch, issue 57).

A built-in registers itself with ``register(KIND, NAME, **meta)`` in a module of its kind's package
(:data:`fedaug.registry.BUILTIN_PACKAGES`), as a decorator or a call. This module parses those modules and
reads every such call whose kind and name are string literals, and whose metadata keywords are literals,
string constants of the module (``AUGMIX_PAPER = "..."``), or ``+`` / f-strings of those. What it reads is the
metadata :func:`fedaug.registry.meta` gives once the modules are imported (``tests/unit/test_cli_list.py``
checks both agree for every built-in, so a registration this reader cannot follow fails there, not in a
user's ``fedaug list``).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

from fedaug import registry
from fedaug.errors import RegistryError


class Unreadable(RegistryError):
    """A registration whose kind, name or metadata is not written as literals."""


def package_dir(package: str) -> Path:
    """The folder of a fedaug package, found without importing it."""
    return Path(registry.__file__).parent.joinpath(*package.split(".")[1:])


def quoted_in_package(kind: str, name: str) -> bool:
    """Whether ``name`` is written as a quoted string in some module of ``kind``'s package (milliseconds:
    the files are read, not parsed). Every built-in's name is, in its ``register`` call or the constant that
    call names (``tests/unit/test_cli_list.py``); a name that is not is looked up in :func:`declared`."""
    quoted = (f'"{name}"', f"'{name}'")
    for path in package_dir(registry.BUILTIN_PACKAGES[kind]).rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if any(q in text for q in quoted):
            return True
    return False


@cache
def declared(kind: str) -> dict[str, registry.Meta | None]:
    """Name -> metadata of every built-in of ``kind``, as written in its ``register`` call."""
    found: dict[str, registry.Meta | None] = {}
    for path in sorted(package_dir(registry.BUILTIN_PACKAGES[kind]).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "register(" in text:
            for entry_kind, name, fields in registrations(text, str(path)):
                if entry_kind == kind:
                    found[name] = registry.make_meta(kind, name, fields) if fields else None
    return found


def registrations(source: str, filename: str = "<source>") -> list[tuple[str, str, dict[str, Any]]]:
    """``(kind, name, metadata keywords)`` of every ``register(...)`` call in ``source``.

    Raises:
        Unreadable: a ``register`` call whose arguments are not literals or the module's constants.
    """
    tree = ast.parse(source, filename=filename)
    constants = _constants(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _callee(node.func) == "register"):
            continue
        try:
            kind, name = (_evaluate(arg, constants) for arg in node.args)
            fields = {kw.arg: _evaluate(kw.value, constants) for kw in node.keywords if kw.arg is not None}
        except (ValueError, KeyError) as exc:
            raise Unreadable(
                f"{filename}:{node.lineno}: register(...) must be written with literals ({exc})"
            ) from None
        if len(fields) != len(node.keywords) or not (isinstance(kind, str) and isinstance(name, str)):
            raise Unreadable(f"{filename}:{node.lineno}: register(KIND, NAME, key=value, ...) with literals")
        found.append((kind, name, fields))
    return found


def _callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "registry":
        return func.attr
    return None


def _constants(tree: ast.Module) -> dict[str, Any]:
    """The module-level ``NAME = <literal>`` assignments (annotated or not) :func:`_evaluate` can read."""
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            target, value = node.target.id, node.value
        else:
            continue
        try:
            constants[target] = _evaluate(value, constants)
        except (ValueError, KeyError):
            continue
    return constants


def _evaluate(node: ast.expr, constants: dict[str, Any]) -> Any:
    """The value of a literal, a known constant, or ``+`` and f-strings of them; ValueError otherwise."""
    if isinstance(node, ast.Name):
        return constants[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _evaluate(node.left, constants) + _evaluate(node.right, constants)
    if isinstance(node, ast.JoinedStr):
        return "".join(_evaluate(part, constants) for part in node.values)
    if isinstance(node, ast.FormattedValue) and node.conversion == -1 and node.format_spec is None:
        return str(_evaluate(node.value, constants))
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_evaluate(item, constants) for item in node.elts)
    return ast.literal_eval(node)
