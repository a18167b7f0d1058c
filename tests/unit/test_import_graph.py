"""The import graph between fedaug's modules has no cycles.

Every ``import`` and ``from ... import`` statement counts, at module level or inside a function (a lazy import
hides a cycle from Python's import machinery, not from the design), with relative imports resolved. Edges:

- ``import fedaug.a.b`` is an edge to ``fedaug.a.b`` (to the longest prefix that is a fedaug module);
- ``from fedaug.a import b`` is an edge to the submodule ``fedaug.a.b`` when there is one, else to
  ``fedaug.a``;
- a package stands for its ``__init__``.

A package ``__init__`` that imports its own submodules (to register them) is fine as long as none of them
imports the package back (they import the specific sibling module instead).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SRC = REPO_ROOT / "src"

ALLOWED_CYCLES: frozenset[frozenset[str]] = frozenset()
"""Groups of modules that import each other and are tolerated for now, each exactly as listed (a group
that grows fails). Empty: the last one, ``fedaug.cli.main`` <-> ``fedaug.cli.flower``, went with
``fedaug.cli.common``."""


def module_files(src: Path, package: str = "fedaug") -> dict[str, tuple[Path, bool]]:
    """Every module of ``package`` under ``src``: dotted name -> (file, is a package ``__init__``)."""
    modules = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(parts)] = (path, is_package)
    return modules


def _known_prefix(name: str, modules: Mapping[str, object]) -> str | None:
    """The longest dotted prefix of ``name`` that is a module of the graph (None: not one of ours)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from ... import`` statement in ``package`` imports from."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def imports_of(module: str, path: Path, is_package: bool, modules: Mapping[str, object]) -> set[str]:
    """The modules of the graph that ``module`` (source ``path``) imports anywhere in its body."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [_known_prefix(alias.name, modules) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else _known_prefix(base, modules)
                for alias in node.names
            ]
        else:
            continue
        found.update(target for target in targets if target is not None)
    found.discard(module)
    return found


def import_graph(src: Path, package: str = "fedaug") -> dict[str, set[str]]:
    """``module -> modules it imports`` over every module of ``package`` under ``src``."""
    modules = module_files(src, package)
    return {name: imports_of(name, path, is_pkg, modules) for name, (path, is_pkg) in modules.items()}


def _reachable(graph: Mapping[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for target in graph[stack.pop()]:
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


def cycles(graph: Mapping[str, set[str]]) -> set[frozenset[str]]:
    """The groups of two or more modules that all reach each other (strongly connected components)."""
    reach = {name: _reachable(graph, name) for name in graph}
    groups = set()
    for name in graph:
        group = frozenset({name} | {other for other in reach[name] if name in reach[other]})
        if len(group) >= 2:
            groups.add(group)
    return groups


def _describe(group: frozenset[str], graph: Mapping[str, set[str]]) -> str:
    return "\n".join(f"  {name} -> {', '.join(sorted(graph[name] & group))}" for name in sorted(group))


def test_fedaug_has_no_import_cycles() -> None:
    # Prepare
    graph = import_graph(SRC)
    # Execute
    found = cycles(graph) - ALLOWED_CYCLES
    # Assert
    assert not found, "import cycles:\n" + "\n\n".join(_describe(group, graph) for group in found)


def test_the_scan_sees_real_imports() -> None:
    graph = import_graph(SRC)
    assert "fedaug.methods.parts.data_pool" in graph["fedaug.methods.fedmix"]  # `from pkg import sub`
    assert "fedaug.data.base" in graph["fedaug.data.sources.mnist"]


def write_files(root: Path, files: Mapping[str, str]) -> Path:
    """``root`` with each of ``files`` (relative path -> text) written under it, folders made as needed."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def fake_package(tmp_path: Path) -> Path:
    """A package ``pkg`` whose imports exercise each edge rule (and one cycle, through a lazy import)."""
    files = {
        "pkg/__init__.py": "from pkg import sub\n",
        "pkg/sub/__init__.py": "from . import leaf\nfrom .leaf import VALUE\n",
        "pkg/sub/leaf.py": "import os\nVALUE = 1\n\ndef late():\n    from ..top import run\n",
        "pkg/top.py": "import pkg.sub.leaf as leaf\nfrom pkg.sub import VALUE\n",
    }
    return write_files(tmp_path, files)


def test_edges_resolve_relative_lazy_and_submodule_imports(fake_package: Path) -> None:
    graph = import_graph(fake_package, "pkg")
    assert graph == {
        "pkg": {"pkg.sub"},
        "pkg.sub": {"pkg.sub.leaf"},
        "pkg.sub.leaf": {"pkg.top"},
        "pkg.top": {"pkg.sub.leaf", "pkg.sub"},
    }
    assert cycles(graph) == {frozenset({"pkg.sub", "pkg.sub.leaf", "pkg.top"})}
