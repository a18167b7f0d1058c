"""CCVR (Luo et al., NeurIPS 2021): the method (:mod:`.method`) and its feature statistics (:mod:`.stats`).
Importing it registers ``ccvr``."""

from fedaug.methods.ccvr import method as method


def __getattr__(name: str) -> object:
    """The names of :mod:`fedaug.methods.ccvr.method` (the old module of this name), for one release."""
    import importlib

    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module("fedaug.methods.ccvr.method"), name)
