"""fedaug: federated learning with scarce, label-skewed data (FLea, Fed-AugMix, Fed-ZDA and baselines).

Nothing runs at import time; the registries load their built-ins lazily (see :mod:`fedaug.registry`).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fedaug")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "unknown"
