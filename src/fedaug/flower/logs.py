"""Flower's logging, quiet by default: one line per message, fedaug's format, no DEBUG without ``-v``.

Left alone, a ``fedaug flower simulate`` printed alembic's INFO lines while Flower's modules were imported
(``setup plugin alembic...``: its database migrations' plugins, of no use to a user), every Flower message
twice (Flower's own console handler on the ``flwr`` logger, and again through the root logger the CLI sets
up), Flower's DEBUG lines (the ``flwr`` logger is at DEBUG and records that propagate skip the root's level),
and Flower's notice that ``run_simulation`` is deprecated, which fedaug knows
(:mod:`fedaug.flower.simulation`) and a user cannot act on. :func:`quiet_flower`, called before Flower is
imported, keeps alembic at WARNING, takes Flower's console handler off (its messages reach stderr once,
through the root logger), puts the ``flwr`` logger at INFO and drops that notice; with ``-v`` (``verbose``)
every line is kept, in fedaug's format, once. The simulation's Ray actors log in their own processes, which
Ray forwards with its ``(ClientAppActor pid=...)`` prefix: :func:`quiet_actor` drops their shutdown notice
there (:data:`ACTOR_SHUTDOWN`), the stray line outside fedaug's format that a loaded host showed.
"""

from __future__ import annotations

import logging
import os

DEPRECATED_RUN_SIMULATION = "DEPRECATED FEATURE: The `run_simulation` function is deprecated"
"""The start of Flower's notice that :func:`flwr.simulation.run_simulation` is deprecated."""

ACTOR_SHUTDOWN = "Manually terminating "
"""The start of the WARNING each simulated ClientApp's Ray actor logs when the simulation ends it
(``flwr.simulation.ray_transport.ray_actor``): a normal shutdown. It is logged in the actor's process, by
Flower's own console handler, and Ray forwards it to the driver's stderr as ``(ClientAppActor pid=...)
WARNING : Manually terminating ClientAppActor`` when the forwarding wins the race against the actor's exit
(every time on a 2-core host at a load of 13, sometimes at lower loads)."""

QUIET_ENV = "FEDAUG_FLOWER_QUIET"
"""``1`` when :func:`quiet_flower` quieted this process without ``-v``: set before Ray starts, so that the
simulation's actor processes inherit it and :func:`quiet_actor` drops their shutdown notice too."""


class _DropKnownNotice(logging.Filter):
    """Drops Flower's ``run_simulation`` deprecation notice and its actors' shutdown notice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().lstrip().startswith((DEPRECATED_RUN_SIMULATION, ACTOR_SHUTDOWN))


def quiet_flower(verbose: bool = False) -> None:
    """Quiets Flower's and alembic's loggers (module docstring); imports Flower's logger module."""
    logging.getLogger("alembic").setLevel(logging.DEBUG if verbose else logging.WARNING)
    from flwr.common import logger as flower_logger  # alembic logs while Flower's modules import

    flower = flower_logger.FLOWER_LOGGER
    flower.removeHandler(flower_logger.console_handler)
    flower.setLevel(logging.DEBUG if verbose else logging.INFO)
    os.environ[QUIET_ENV] = "0" if verbose else "1"
    if not verbose:
        _drop_known_notices(flower)


def quiet_actor() -> None:
    """In a process whose parent ran :func:`quiet_flower` without ``-v`` (a simulation's Ray actor, where a
    ClientApp runs; :data:`QUIET_ENV`), drops the actor's shutdown notice at its source; elsewhere (a
    SuperNode of a deployment, ``-v``) nothing. Called as the ClientApp handles each message (once is enough;
    it is idempotent)."""
    if os.environ.get(QUIET_ENV) == "1":
        _drop_known_notices(logging.getLogger("flwr"))


def _drop_known_notices(flower: logging.Logger) -> None:
    if not any(isinstance(f, _DropKnownNotice) for f in flower.filters):
        flower.addFilter(_DropKnownNotice())
