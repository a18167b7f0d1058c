"""Plugins: user code that registers datasets, models, methods and partitioners without forking fedaug.

A plugin is a module name (``my_package.my_module``, importable from ``sys.path`` or the current directory)
or a Python file (``./my_file.py``, relative to the directory fedaug runs in). A config lists them under
``plugins:`` and every command takes ``--plugin``; both end up in the run's ``config.yaml``, and
:func:`import_plugins` imports them again wherever that config is resolved (a resumed run, each sweep worker
process, each Flower node), so a run behaves the same everywhere. Importing a plugin twice in one process
runs it once.

A plugin registers its pieces with the public decorators::

    import fedaug
    from fedaug.data.base import Dataset

    @fedaug.register_dataset("my_data")
    def my_data(ctx, *, path: str = "my.npz") -> Dataset: ...

    @fedaug.register_model("my_net")
    def my_net(*, num_classes: int, input_shape: tuple[int, ...]) -> torch.nn.Module: ...

Each decorator takes the same optional metadata keywords as :func:`fedaug.registry.register` (a method's
``summary=`` and ``paper=``, ...: the fields of :data:`fedaug.registry.META_TYPES`), which ``fedaug list``
prints; without them it prints the first line of the docstring and where the entry came from.

A plugin that fails to import (an exception, ``sys.exit()``, or argparse refusing the command line, which a
plugin sees as empty while it is imported), registers a name that is already taken, or registers a method
that is not a :class:`~fedaug.api.Method` raises :class:`PluginError`: one line naming the plugin and the
problem (the CLI's exit 2, before any run dir is written). A dataset or model whose function returns the
wrong type is refused where it is built (:func:`fedaug.data.datasets.load_dataset`,
:func:`fedaug.models.build_model`), and a partitioner's index that is no training sample where it is drawn
(:func:`fedaug.data.partition.base.check_output`), naming the plugin (:func:`origin`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import io
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from fedaug import registry
from fedaug.errors import FedaugError

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_LOADED: dict[str, ModuleType] = {}
"""Plugin (a module name, or a file's resolved path) -> its module: each imported once per process."""

_MODULES: dict[str, str] = {}
"""Module name -> the plugin spec it was imported for (to name the plugin in errors)."""

_NAMES: dict[str, set[str]] = {}
"""Kind -> the names registered through the public decorators (``fedaug list`` adds them to the built-ins)."""

_CURRENT: list[str] = []
"""The plugin being imported (a stack: a plugin may import another)."""


class PluginError(FedaugError):
    """A plugin could not be imported, registered a taken name, or gave fedaug an object of the wrong type."""


def is_file_plugin(spec: str) -> bool:
    """Whether ``spec`` names a Python file (ends in ``.py`` or holds a path separator), not a module."""
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def import_plugins(specs: Iterable[str]) -> list[ModuleType]:
    """Imports every plugin of ``specs`` not imported yet in this process; returns their modules.

    Raises:
        PluginError: one line naming the plugin that failed and why.
    """
    return [import_plugin(spec) for spec in specs]


def import_plugin(spec: str) -> ModuleType:
    """Imports one plugin (a module name or a ``.py`` file); see :func:`import_plugins`."""
    if not isinstance(spec, str) or not spec.strip():
        raise PluginError(f"a plugin must be a module name or a .py file, got {spec!r}")
    key = str(Path(spec).expanduser().resolve()) if is_file_plugin(spec) else spec  # ./p.py from another dir
    if key in _LOADED:
        return _LOADED[key]
    _CURRENT.append(spec)
    argv, stderr = sys.argv, io.StringIO()
    sys.argv = [spec]  # a plugin that parses "its" command line sees none, not fedaug's
    try:
        with contextlib.redirect_stderr(stderr):  # what it prints is shown after, not amid a usage error
            module = _import_file(spec) if is_file_plugin(spec) else _import_module(spec)
    except PluginError:
        raise
    except FedaugError as exc:  # a registry refusal (a taken name, a wrong type) raised during the import
        raise PluginError(f"plugin {spec!r}: {_one_line(exc)}") from exc
    except SystemExit as exc:  # sys.exit(), or argparse refusing the command line, at import
        said = [line for line in stderr.getvalue().splitlines() if line.strip()]
        raise PluginError(
            f"plugin {spec!r} exited while being imported (SystemExit({exc.code!r})"
            + (f"; it printed: {' '.join(said[-1].split())}" if said else "")
            + "); a plugin must not call sys.exit() or parse the command line at import"
        ) from None
    except Exception as exc:  # any failure of the user's code: one line, not a traceback
        raise PluginError(
            f"plugin {spec!r} failed to import: {type(exc).__name__}: {_one_line(exc)}"
        ) from exc
    else:
        sys.stderr.write(stderr.getvalue())
    finally:
        sys.argv = argv
        _CURRENT.pop()
    _LOADED[key] = module
    _MODULES[module.__name__] = spec
    return module


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _import_module(spec: str) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path:  # `fedaug` is a console script: the current directory is not on sys.path
        sys.path.append(cwd)
    try:
        # the same file imported before as a file plugin: that module, not a second run of it
        if spec not in sys.modules:
            found = importlib.util.find_spec(spec)
            same = _loaded_from(Path(found.origin)) if found and found.origin else None
            if same is not None:
                sys.modules[spec] = same
                return same
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name is not None and spec.split(".")[0] == exc.name.split(".")[0]:
            raise PluginError(
                f"plugin {spec!r} not found: no module {exc.name!r} on the Python path or in {cwd} "
                "(a file plugin needs a path ending in .py, e.g. ./my_plugin.py)"
            ) from None
        raise


def _import_file(spec: str) -> ModuleType:
    path = Path(spec).expanduser().resolve()
    if not path.is_file():
        raise PluginError(
            f"plugin {spec!r} not found: no file {path} (a file plugin's path is relative to the directory "
            "fedaug runs in)"
        )
    same = _loaded_from(path)  # already imported under its own name (a notebook's import)
    if same is not None:
        return same
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    name = f"fedaug_plugin_{path.stem}_{digest}"
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise PluginError(f"plugin {spec!r}: {path} is not a Python file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module  # classes defined there pickle (sweep workers) and dataclasses resolve
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _loaded_from(path: Path) -> ModuleType | None:
    """The module already imported from the file ``path``, if any."""
    path = path.resolve()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == path:
            return module
    return None


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def plugin_digests(specs: Iterable[str]) -> dict[str, str]:
    """Each plugin of ``specs`` imported in this process -> the SHA-256 of its module's file, now: what a
    resumed run made with a plugin's code compares, so that changed code is never silently reused."""
    found = {}
    for spec in specs:
        key = str(Path(spec).expanduser().resolve()) if is_file_plugin(spec) else spec
        file = getattr(_LOADED.get(key), "__file__", None)
        if file and Path(file).is_file():
            found[spec] = file_digest(Path(file))
    return found


def changed_inputs(recorded: Mapping[str, Any], now: Mapping[str, str]) -> list[str]:
    """Each input of a run (``plugin <spec>``, ``data file <path>``: :func:`fedaug.runs.verify.input_digests`)
    whose SHA-256 differs between ``recorded`` (a checkpoint's) and ``now``, in name order, worded for a
    WARNING: ``plugin ./net.py (SHA-256 1a2b3c4d5e6f, now 6f5e4d3c2b1a)`` (``none`` where one lacks it)."""
    return [
        f"{name} (SHA-256 {str(recorded.get(name, 'none'))[:12]}, now {str(now.get(name, 'none'))[:12]})"
        for name in sorted(recorded.keys() | now.keys())
        if recorded.get(name) != now.get(name)
    ]


def code_digest(obj: Any) -> str | None:
    """The SHA-256 of the file of the plugin that defined ``obj``; None for fedaug's own code (whose version
    the caches key on themselves) and for code that is no plugin's."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    if module is None or module.__name__ not in _MODULES:
        return None
    file = getattr(module, "__file__", None)
    return file_digest(Path(file)) if file and Path(file).is_file() else None


def origin(obj: Any) -> str:
    """Where ``obj`` was defined, for error messages: ``plugin './p.py'`` or ``module 'pkg.mod'``."""
    module = getattr(obj, "__module__", None) or "?"
    spec = _MODULES.get(module) or (
        _CURRENT[-1] if _CURRENT and module.startswith("fedaug_plugin_") else None
    )
    return f"plugin {spec!r}" if spec else f"module {module!r}"


def _register(kind: str, name: str, obj: T, meta: dict[str, Any]) -> T:
    """Registers ``obj`` after the built-ins of ``kind`` are loaded, so a taken name is always caught."""
    registry.available(kind)  # loads the built-ins of this kind
    taken = name in registry.available(kind) and registry.get(kind, name) is not obj
    if taken:
        raise PluginError(
            f"{_who()}{kind} {name!r} is already registered ({origin(registry.get(kind, name))}); "
            f"pick another name"
        )
    try:
        decorator = registry.register(kind, name, **meta)
    except FedaugError as exc:  # wrong metadata keywords
        raise PluginError(f"{_who()}{_one_line(exc)}") from exc
    _NAMES.setdefault(kind, set()).add(name)
    return decorator(obj)


def user_names(kind: str) -> set[str]:
    """The names of ``kind`` registered with the public decorators in this process (by plugins)."""
    return set(_NAMES.get(kind, ()))


def _who() -> str:
    return f"plugin {_CURRENT[-1]!r}: " if _CURRENT else ""


def register_dataset(name: str, **meta: Any) -> Callable[[F], F]:
    """Registers a dataset loader ``fn(ctx: LoadContext, *, option=default, ...) -> Dataset`` as ``name``.

    Its keyword-only arguments are the dataset's options (``--set data.<option>=...``); it must return a
    :class:`fedaug.data.base.Dataset`.
    """
    return lambda fn: _register("dataset", name, fn, meta)


def register_model(name: str, **meta: Any) -> Callable[[F], F]:
    """Registers a model builder ``fn(*, num_classes, input_shape, option=default, ...) -> nn.Module``.

    A :class:`fedaug.models.base.SplitModel` (e.g. ``SplitModel.from_encoder_head(encoder, head)``) works
    with every method; any other ``nn.Module`` with the methods that only call it (FedAvg, FedProx, ...).
    """
    return lambda fn: _register("model", name, fn, meta)


def register_partitioner(name: str, **meta: Any) -> Callable[[F], F]:
    """Registers a partitioner ``fn(labels, *, num_clients, num_classes, rng, option=default, ...)`` returning
    one index array per client (see :mod:`fedaug.data.partition`)."""
    return lambda fn: _register("partitioner", name, fn, meta)


def register_method(name: str, **meta: Any) -> Callable[[T], T]:
    """Registers a :class:`fedaug.api.Method` subclass as ``name`` (its ``config_cls`` holds its options)."""

    def decorator(cls: T) -> T:
        from fedaug.api import Method

        if not (isinstance(cls, type) and issubclass(cls, Method)):
            raise PluginError(f"{_who()}method {name!r} must be a subclass of fedaug.api.Method, got {cls!r}")
        return _register("method", name, cls, meta)

    return decorator
