"""``fedaug attack <name>``: one sub-command per registered attack (see :mod:`fedaug.attacks`)."""

from __future__ import annotations

import argparse

from fedaug import registry


def add_attack_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``attack`` with one sub-parser per registered attack."""
    attack = sub.add_parser("attack", help="privacy attacks (reconstruction, context, inversion)")
    attacks = attack.add_subparsers(dest="attack", required=True, metavar="ATTACK")
    for name in registry.available("attack"):
        command = registry.get("attack", name)
        parser = attacks.add_parser(name, help=command.help)
        command.add_arguments(parser)
        parser.set_defaults(func=command.run)
