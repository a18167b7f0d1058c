"""The ``fedaug`` command: one module per command group (:mod:`.main` parses and dispatches)."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The console entry point; imports the parser only when called."""
    from fedaug.cli.main import main as run

    return run(argv)


def __getattr__(name: str) -> object:
    """The names of :mod:`fedaug.cli.main` (the old module of this name), for one release."""
    import importlib

    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module("fedaug.cli.main"), name)
