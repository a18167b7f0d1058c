"""Privacy attacks, each a ``fedaug attack <name>`` sub-command.

An attack module registers a class under the ``attack`` registry kind::

    @register("attack", "reconstruct")
    class Reconstruct:
        help = "one line for `fedaug attack --help`"

        @staticmethod
        def add_arguments(parser: argparse.ArgumentParser) -> None: ...

        @staticmethod
        def run(args: argparse.Namespace) -> int: ...   # exit code

and is imported below so that registering happens when the registry loads the kind.
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


# Attack modules (imported for their @register side effect); keep one line per module.
from fedaug.attacks import aggregate as aggregate  # noqa: E402
from fedaug.attacks import context as context  # noqa: E402
from fedaug.attacks import frontier as frontier  # noqa: E402
from fedaug.attacks import invert as invert  # noqa: E402
from fedaug.attacks import invert_frontier as invert_frontier  # noqa: E402
from fedaug.attacks import reconstruct as reconstruct  # noqa: E402
