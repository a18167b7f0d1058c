"""fedaug: federated learning with scarce, label-skewed data (FLea, Fed-AugMix, Fed-ZDA and baselines).

Nothing runs at import time; the registries load their built-ins lazily (see :mod:`fedaug.registry`).
Your own datasets, models, methods and partitioners: :func:`register_dataset`, :func:`register_model`,
:func:`register_method`, :func:`register_partitioner` in a plugin (:mod:`fedaug.plugins`).
"""

from importlib.metadata import PackageNotFoundError, version

from fedaug.plugins import (
    PluginError,
    import_plugins,
    register_dataset,
    register_method,
    register_model,
    register_partitioner,
)
from fedaug.runtime import startup as _startup  # noqa: F401  (first of fedaug's: the start-up clock starts here)
from fedaug.runtime.moved import install as _install_moved

_install_moved()  # the old import paths of moved modules, for one release

__all__ = [
    "PluginError",
    "__version__",
    "import_plugins",
    "register_dataset",
    "register_method",
    "register_model",
    "register_partitioner",
]

try:
    __version__ = version("fedaug")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "unknown"
