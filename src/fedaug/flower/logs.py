"""Flower's logging, quiet by default: one line per message, fedaug's format, no DEBUG without ``-v``.

Left alone, a ``fedaug flower simulate`` printed alembic's INFO lines while Flower's modules were imported
(``setup plugin alembic...``: its database migrations' plugins, of no use to a user), every Flower message
twice (Flower's own console handler on the ``flwr`` logger, and again through the root logger the CLI sets
up), Flower's DEBUG lines (the ``flwr`` logger is at DEBUG and records that propagate skip the root's level),
and Flower's notice that ``run_simulation`` is deprecated, which fedaug knows
(:mod:`fedaug.flower.simulation`) and a user cannot act on. :func:`quiet_flower`, called before Flower is
imported, keeps alembic at WARNING, takes Flower's console handler off (its messages reach stderr once,
through the root logger), puts the ``flwr`` logger at INFO and drops that notice; with ``-v`` (``verbose``)
every line is kept, in fedaug's format, once.
"""

from __future__ import annotations

import logging

DEPRECATED_RUN_SIMULATION = "DEPRECATED FEATURE: The `run_simulation` function is deprecated"
"""The start of Flower's notice that :func:`flwr.simulation.run_simulation` is deprecated."""


class _DropKnownNotice(logging.Filter):
    """Drops Flower's ``run_simulation`` deprecation notice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().lstrip().startswith(DEPRECATED_RUN_SIMULATION)


def quiet_flower(verbose: bool = False) -> None:
    """Quiets Flower's and alembic's loggers (module docstring); imports Flower's logger module."""
    logging.getLogger("alembic").setLevel(logging.DEBUG if verbose else logging.WARNING)
    from flwr.common import logger as flower_logger  # alembic logs while Flower's modules import

    flower = flower_logger.FLOWER_LOGGER
    flower.removeHandler(flower_logger.console_handler)
    flower.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not verbose and not any(isinstance(f, _DropKnownNotice) for f in flower.filters):
        flower.addFilter(_DropKnownNotice())
