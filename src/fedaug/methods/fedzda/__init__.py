"""Fed-ZDAC / Fed-ZDAS (Hao et al., CVPR Workshops 2021): the methods (:mod:`.method`) and zero-shot data
generation from BN statistics (:mod:`.zsdg`). Importing it registers ``fedzdac`` and ``fedzdas``."""

from fedaug.methods.fedzda import method as method


def __getattr__(name: str) -> object:
    """The names of :mod:`fedaug.methods.fedzda.method` (the old module of this name), for one release."""
    import importlib

    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module("fedaug.methods.fedzda.method"), name)
