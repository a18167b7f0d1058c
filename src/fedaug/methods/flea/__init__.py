"""FLea (Xia et al., KDD 2024): the method (:mod:`.method`), its loss (:mod:`.loss`), feature buffer
(:mod:`.buffer`) and head passes (:mod:`.head_passes`). Importing it registers ``flea`` and its presets."""

from fedaug.methods.flea import method as method


def __getattr__(name: str) -> object:
    """The names of :mod:`fedaug.methods.flea.method` (the old module of this name), for one release."""
    import importlib

    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module("fedaug.methods.flea.method"), name)
