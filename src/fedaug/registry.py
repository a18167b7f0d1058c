"""Name -> object registries for methods, models, datasets, partitioners and attacks (torchvision style).

Usage::

    @register("model", "harnet")
    def harnet(*, num_classes: int, input_shape: tuple[int, ...]) -> SplitModel: ...

    build = get("model", "harnet")
    available("model")  # ['harnet', ...]

Registering a name twice raises; an unknown name raises :class:`RegistryError` listing the valid names.
A method entry is a :class:`~fedaug.api.Method` class or a preset of one
(:class:`~fedaug.methods.parts.preset.MethodPreset`, e.g. ``flea_official``), which answers as the class does:
``name``, ``config_cls``, and a call with an optional config that returns the method.
Modules that register things are imported lazily by :func:`_ensure_loaded`, so importing fedaug runs nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

from fedaug.errors import RegistryError

KINDS = ("method", "model", "dataset", "partitioner", "attack")

# Modules whose import registers the built-in entries of each kind.
_BUILTIN_MODULES: dict[str, tuple[str, ...]] = {
    "method": ("fedaug.methods",),
    "model": ("fedaug.models",),
    "dataset": ("fedaug.data.datasets",),
    "partitioner": ("fedaug.data.partition",),
    "attack": ("fedaug.attacks",),
}

_REGISTRY: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}
_LOADED: set[str] = set()

T = TypeVar("T")


def _check_kind(kind: str) -> None:
    if kind not in _REGISTRY:
        raise RegistryError(f"unknown registry kind {kind!r}; valid kinds: {', '.join(KINDS)}")


def register(kind: str, name: str) -> Callable[[T], T]:
    """Decorator that registers ``obj`` under ``name`` in the ``kind`` registry."""
    _check_kind(kind)

    def decorator(obj: T) -> T:
        table = _REGISTRY[kind]
        if name in table and table[name] is not obj:
            raise RegistryError(f"{kind} {name!r} is already registered")
        table[name] = obj
        return obj

    return decorator


def _ensure_loaded(kind: str) -> None:
    if kind in _LOADED:
        return
    _LOADED.add(kind)
    for module in _BUILTIN_MODULES[kind]:
        importlib.import_module(module)


def get(kind: str, name: str) -> Any:
    """Returns the object registered as ``name``; raises RegistryError naming the valid choices."""
    _check_kind(kind)
    _ensure_loaded(kind)
    table = _REGISTRY[kind]
    if name not in table:
        raise RegistryError(f"unknown {kind} {name!r}; valid choices: {', '.join(sorted(table))}")
    return table[name]


def available(kind: str) -> list[str]:
    """Sorted names registered for ``kind``."""
    _check_kind(kind)
    _ensure_loaded(kind)
    return sorted(_REGISTRY[kind])
