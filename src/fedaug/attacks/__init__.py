"""Privacy attacks, each a ``fedaug attack <name>`` sub-command.

An attack module registers a class under the ``attack`` registry kind::

    @register("attack", "reconstruct")
    class Reconstruct:
        help = "one line for `fedaug attack --help`"

        @staticmethod
        def add_arguments(parser: argparse.ArgumentParser) -> None: ...

        @staticmethod
        def run(args: argparse.Namespace) -> int: ...   # exit code

in a module of this package: the registry imports every module here when it loads the kind
(:func:`fedaug.registry._ensure_loaded`).
"""

from __future__ import annotations

import argparse
from typing import Protocol


class AttackCommand(Protocol):
    """What an attack registers: a CLI description and an entry point."""

    help: str

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None: ...

    @staticmethod
    def run(args: argparse.Namespace) -> int: ...
