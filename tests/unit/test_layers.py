"""The layers of fedaug: every import runs down (or within its layer), never up, and the package never imports
``tools``.

The layers, top to bottom (docs/guide/architecture.md draws them)::

    cli
    flower, attacks                  the adapters and the attacks, over everything a run is
    sweeps, script, fedaug           many runs; the Python API; the package's face
    results                          reading run dirs into tables and figures
    runs                             one run's life
    config                           what a run is
    engine                           the round loop
    methods
    augment, privacy                 what methods are made of
    training                         the local loop and the hooked client
    models, data
    runtime                          device, precision, seeding, files
    the contract                     api, registry, plugins, errors, types, validation

An import inside ``if TYPE_CHECKING:`` names a type only (the contract names the model type), so it is no
dependency and not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.unit.test_import_graph import _absolute, _known_prefix, module_files, write_files

SRC = REPO_ROOT / "src"

LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(names.split())
    for names in (
        "cli __main__",
        "flower attacks",
        "sweeps script fedaug",
        "results",
        "runs",
        "config",
        "engine",
        "methods",
        "augment privacy",
        "training",
        "models data",
        "runtime",
        "api registry plugins errors types validation",
    )
)
"""Top to bottom: a module may import its own layer and those below it."""

RANK = {name: len(LAYERS) - at for at, names in enumerate(LAYERS) for name in names}


def part(module: str) -> str:
    """The top-level part of fedaug a module belongs to: ``fedaug.engine.simulation`` -> ``engine``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "fedaug"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes under an ``if TYPE_CHECKING:``."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            inside.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return inside


def runtime_imports(src: Path, package: str = "fedaug") -> dict[str, set[str]]:
    """``module -> every module it imports`` (fedaug's and any other's top-level name), anywhere in its
    body but under ``if TYPE_CHECKING:``."""
    modules = module_files(src, package)
    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        skip = _type_checking_nodes(tree)
        base_package = module if is_package else module.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, base_package)
                names = [f"{base}.{alias.name}" for alias in node.names] or [base]
            else:
                continue
            for name in names:
                found.add(_known_prefix(name, modules) or name)
        found.discard(module)
        graph[module] = found
    return graph


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for each import of ``b`` by ``a`` from a lower layer than ``b``'s."""
    return sorted(
        f"{module} ({part(module)}) -> {target} ({part(target)})"
        for module, targets in graph.items()
        for target in targets
        if target.startswith("fedaug") and RANK[part(module)] < RANK[part(target)]
    )


def test_every_part_of_fedaug_has_a_layer() -> None:
    parts = {part(module) for module in module_files(SRC)}
    assert parts - set(RANK) == set(), "place the new package in LAYERS (and docs/guide/architecture.md)"


def test_no_import_runs_up_a_layer() -> None:
    assert upward_imports(runtime_imports(SRC)) == []


def test_the_package_never_imports_the_projects_tools() -> None:
    graph = runtime_imports(SRC)
    found = sorted(
        f"{m} -> {t}" for m, targets in graph.items() for t in targets if t.split(".")[0] == "tools"
    )
    assert found == []


def test_the_engine_imports_no_method() -> None:
    graph = runtime_imports(SRC)
    engine = {m: t for m, t in graph.items() if part(m) == "engine"}
    assert sorted(f"{m} -> {t}" for m, ts in engine.items() for t in ts if part(t) == "methods") == []


@pytest.fixture
def fake_fedaug(tmp_path: Path) -> Path:
    """A package ``fedaug`` whose runtime imports the engine (up), whose api names a model under
    TYPE_CHECKING (allowed) and whose engine imports ``tools`` lazily."""
    files = {
        "fedaug/__init__.py": "",
        "fedaug/api.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from fedaug.models import M\n",
        "fedaug/models.py": "M = 1\n",
        "fedaug/runtime/__init__.py": "",
        "fedaug/runtime/device.py": "def f():\n    from fedaug.engine import sim\n",
        "fedaug/engine/__init__.py": "",
        "fedaug/engine/sim.py": "def g():\n    import tools.campaign\n",
    }
    return write_files(tmp_path, files)


def test_the_check_sees_an_upward_import_and_passes_a_type_only_one(fake_fedaug: Path) -> None:
    graph = runtime_imports(fake_fedaug)
    assert upward_imports(graph) == ["fedaug.runtime.device (runtime) -> fedaug.engine.sim (engine)"]
    assert "tools.campaign" in graph["fedaug.engine.sim"]
    assert graph["fedaug.api"] == {"typing.TYPE_CHECKING"}  # the model is named, not imported
