"""A plugin for the tests (``tiny_plugin``) and :func:`isolated_plugins`, undoing what plugins register."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from fedaug import plugins, registry


@contextmanager
def isolated_plugins() -> Iterator[None]:
    """Inside, plugins register and import as usual; after, the registries, the plugins' bookkeeping and
    ``sys.modules`` are as before, so a test's plugin names never show in another test's lists."""
    for kind in registry.KINDS:  # built-ins first: those loaded inside (attacks) must survive the restore
        registry.available(kind)
    tables = {kind: dict(table) for kind, table in registry._REGISTRY.items()}
    metas = {kind: dict(table) for kind, table in registry._META.items()}
    loaded, modules = dict(plugins._LOADED), dict(plugins._MODULES)
    names = {kind: set(found) for kind, found in plugins._NAMES.items()}
    before = set(sys.modules)
    try:
        yield
    finally:
        new = {id(m) for key, m in plugins._LOADED.items() if key not in loaded}
        for key in set(sys.modules) - before:
            if id(sys.modules[key]) in new or key in plugins._MODULES:
                del sys.modules[key]
        for kind, table in tables.items():
            registry._REGISTRY[kind].clear()
            registry._REGISTRY[kind].update(table)
            registry._META[kind].clear()
            registry._META[kind].update(metas[kind])
        plugins._LOADED.clear()
        plugins._LOADED.update(loaded)
        plugins._MODULES.clear()
        plugins._MODULES.update(modules)
        plugins._NAMES.clear()
        plugins._NAMES.update(names)
