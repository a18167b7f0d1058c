"""One writer per run directory: an OS file lock (``flock``) on ``RUN_DIR/.lock``, held for a whole run.

A second process on the same run dir is refused at once (:class:`~fedaug.errors.RunLockedError` naming the
holder's PID, which the holder writes into the lock file). The kernel releases the lock when its holder exits
in any way (an exception, Ctrl-C, SIGKILL, a crash), so a stale ``.lock`` file never blocks a resume. The
file itself is left in place: removing it would let a third process lock a new file while a second still
holds the old one.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from fedaug.errors import RunLockedError, path_error

LOCK_NAME = ".lock"
"""The lock file in a run dir (ignored by report and archive, kept by ``--fresh``)."""


class RunDirLock:
    """``with RunDirLock(run_dir):`` creates ``run_dir`` (and its parents) and holds its lock inside."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Takes the lock without waiting.

        Raises:
            RunLockedError: another process holds it (naming its PID).
            PathError: the run dir cannot be created or the lock file opened (naming the path).
        """
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise path_error(exc, self.path, "create the run dir lock") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise RunLockedError(_in_use(self.run_dir, holder)) from None
        except OSError as exc:
            os.close(fd)
            raise path_error(exc, self.path, "lock") from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Releases the lock (closing the file releases the ``flock``); a no-op when not held."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunDirLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def check_unlocked(run_dir: Path) -> None:
    """Raises RunLockedError (naming the holder's PID) when another process holds ``run_dir``'s lock; creates
    nothing (for a refusal before any data is loaded; :class:`RunDirLock` is what keeps the run dir)."""
    try:
        fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC)
    except OSError:  # no lock file (a new run dir), or unreadable: RunDirLock reports it
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunLockedError(_in_use(run_dir, _read_pid(fd))) from None
    except OSError:
        return
    finally:
        os.close(fd)  # releases the lock taken for the test


def _in_use(run_dir: Path, holder: str) -> str:
    return (
        f"{run_dir} is in use by another fedaug process (PID {holder}); wait for it to end (or stop it), "
        "then run the same command again"
    )


def _read_pid(fd: int) -> str:
    """The PID the holder wrote into the lock file ('unknown' while it has not yet)."""
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"
