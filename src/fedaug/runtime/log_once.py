"""Facts that one command logs once.

A command loads its dataset and partition in several stages (``fedaug run`` checks every method's run before
the first one starts, then runs each), and each stage used to announce them again. :func:`info_once` logs a
line at INFO the first time its text is seen in the process and at DEBUG after that (``fedaug -v`` still
shows every load); :func:`forget` starts afresh (``fedaug.cli.main.main`` calls it, so that each command run
in
one process, as the tests do, logs its facts once).
"""

from __future__ import annotations

import logging

_SEEN: set[str] = set()


def info_once(logger: logging.Logger, message: str, *args: object) -> None:
    """``logger.info(message, *args)`` the first time this text is logged, ``logger.debug`` after."""
    text = message % args if args else message
    if text in _SEEN:
        logger.debug(message, *args)
        return
    _SEEN.add(text)
    logger.info(message, *args)


def forget() -> None:
    """Forgets the lines logged so far: the next :func:`info_once` of each logs at INFO again."""
    _SEEN.clear()
