"""SIGTERM as Ctrl-C: a signal handler that raises KeyboardInterrupt, and a block inside which SIGTERM uses it
(torch-free, so ``fedaug run`` sets it before its imports; :mod:`fedaug.sweeps.workers` uses it too)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


def interrupt(signum: int, frame: FrameType | None) -> None:
    """A signal handler that raises KeyboardInterrupt (so ``finally`` blocks and cleanup run)."""
    del signum, frame
    raise KeyboardInterrupt


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside: SIGTERM raises KeyboardInterrupt; the previous handler is put back after. Only the main thread
    can set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
