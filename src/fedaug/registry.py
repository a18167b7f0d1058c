"""Name -> object registries for methods, models, datasets, partitioners and attacks (torchvision style).

Usage::

    @register("model", "harnet", summary="4 conv blocks for inertial windows (FLea papers)",
              input_shape=(1, 128, 3), params=691_974, default_split=1, num_classes=6)
    def harnet(*, num_classes: int, input_shape: tuple[int, ...]) -> SplitModel: ...

    build = get("model", "harnet")
    available("model")  # ['harnet', ...]
    meta("model", "harnet").params  # 691974

Registering a name twice raises; an unknown name raises :class:`RegistryError` listing the valid names.
A method entry is a :class:`~fedaug.api.Method` class or a preset of one
(:class:`~fedaug.methods.parts.preset.MethodPreset`, e.g. ``flea_official``), which answers as the class does:
``name``, ``config_cls``, and a call with an optional config that returns the method.

Each entry carries what ``fedaug list`` says about it beside its code, as keywords of its ``register`` call:
one small frozen dataclass per kind (:data:`META_TYPES`: a method's one-line summary and paper, a dataset's
shape, size, classes, source and license, ...). A built-in's keywords are literals (or the module's string
constants), so that ``fedaug list`` reads them from the source without importing torch
(:mod:`fedaug.cli.declared`). An entry registered without them (a plugin's) lists from its docstring.

The built-ins of a kind are every module of its package (:data:`BUILTIN_PACKAGES`), imported on the first
:func:`get` or :func:`available` of that kind by :func:`_ensure_loaded`: importing fedaug runs nothing, and a
new module registers its entries without being added to a list.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fedaug.errors import RegistryError

KINDS = ("method", "model", "dataset", "partitioner", "attack")

BUILTIN_PACKAGES: dict[str, str] = {
    "method": "fedaug.methods",
    "model": "fedaug.models",
    "dataset": "fedaug.data.sources",
    "partitioner": "fedaug.data.partition",
    "attack": "fedaug.attacks",
}
"""The package whose modules (all of them, subpackages included) register the built-ins of each kind."""


@dataclass(frozen=True)
class MethodMeta:
    """A method: what it changes from FedAvg (one line) and the paper it comes from."""

    summary: str
    paper: str


@dataclass(frozen=True)
class DatasetMeta:
    """A dataset: shape of one sample, train / test sizes, classes, where it comes from and its license."""

    shape: str
    size: str
    classes: str
    source: str
    license: str


@dataclass(frozen=True)
class ModelMeta:
    """A model: what it is, the input it was built for, its parameters there and its default split layer.

    ``params`` counts the model built for ``input_shape`` and ``num_classes`` (None: depends on the input);
    ``tests/unit/test_cli_list.py`` builds every model and checks ``params`` and ``default_split``.
    """

    summary: str
    input_shape: tuple[int, ...] | None
    params: int | None
    default_split: int
    num_classes: int = 10


@dataclass(frozen=True)
class PartitionerMeta:
    """A partitioner: what it does (its options are read from its signature)."""

    summary: str


@dataclass(frozen=True)
class AttackMeta:
    """An attack: the paper it follows (its one-line description is the command's ``help``)."""

    paper: str


Meta = MethodMeta | DatasetMeta | ModelMeta | PartitionerMeta | AttackMeta

META_TYPES: dict[str, type[Meta]] = {
    "method": MethodMeta,
    "dataset": DatasetMeta,
    "model": ModelMeta,
    "partitioner": PartitionerMeta,
    "attack": AttackMeta,
}
"""Kind -> the dataclass its ``register`` keywords build."""

_REGISTRY: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}
_META: dict[str, dict[str, Meta]] = {kind: {} for kind in KINDS}
_LOADED: set[str] = set()

T = TypeVar("T")


def _check_kind(kind: str) -> None:
    if kind not in _REGISTRY:
        raise RegistryError(f"unknown registry kind {kind!r}; valid kinds: {', '.join(KINDS)}")


def make_meta(kind: str, name: str, fields: dict[str, Any]) -> Meta:
    """The metadata of ``kind`` built from ``register``'s keywords; RegistryError naming a wrong keyword."""
    _check_kind(kind)
    meta_type = META_TYPES[kind]
    valid = [field.name for field in dataclasses.fields(meta_type)]
    unknown = sorted(set(fields) - set(valid))
    missing = [
        field.name
        for field in dataclasses.fields(meta_type)
        if field.name not in fields and field.default is dataclasses.MISSING
    ]
    if unknown or missing:
        wrong = f"unknown {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
        raise RegistryError(f"{kind} {name!r}: metadata {wrong}; a {kind} takes {', '.join(valid)}")
    value = fields.get("input_shape")
    if isinstance(value, list):  # a shape written as a list is the same shape
        fields = {**fields, "input_shape": tuple(value)}
    return meta_type(**fields)


def register(kind: str, name: str, **meta: Any) -> Callable[[T], T]:
    """Decorator that registers ``obj`` under ``name`` in the ``kind`` registry, with its metadata.

    ``meta`` are the fields of the kind's :data:`META_TYPES` dataclass (all or none: an entry without them
    lists from its docstring).
    """
    _check_kind(kind)
    info = make_meta(kind, name, meta) if meta else None

    def decorator(obj: T) -> T:
        table = _REGISTRY[kind]
        if name in table and table[name] is not obj:
            raise RegistryError(f"{kind} {name!r} is already registered")
        table[name] = obj
        if info is None:
            _META[kind].pop(name, None)
        else:
            _META[kind][name] = info
        return obj

    return decorator


def _ensure_loaded(kind: str) -> None:
    """Imports every module of the kind's package (once), which registers its built-ins."""
    if kind in _LOADED:
        return
    _LOADED.add(kind)
    package = importlib.import_module(BUILTIN_PACKAGES[kind])
    for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        importlib.import_module(module.name)


def get(kind: str, name: str) -> Any:
    """Returns the object registered as ``name``; raises RegistryError naming the valid choices."""
    _check_kind(kind)
    _ensure_loaded(kind)
    table = _REGISTRY[kind]
    if name not in table:
        raise RegistryError(f"unknown {kind} {name!r}; valid choices: {', '.join(sorted(table))}")
    return table[name]


def meta(kind: str, name: str) -> Meta | None:
    """The metadata ``name`` was registered with (None: registered without, e.g. by a plugin)."""
    get(kind, name)  # an unknown name raises, naming the valid ones
    return _META[kind].get(name)


def available(kind: str) -> list[str]:
    """Sorted names registered for ``kind``."""
    _check_kind(kind)
    _ensure_loaded(kind)
    return sorted(_REGISTRY[kind])
