"""A sweep's worker processes stop with the sweep.

``fedaug sweep --workers N`` runs its runs in N spawned worker processes (``ProcessPoolExecutor``). Left to
themselves, workers whose sweep was stopped (``kill``, a scheduler ending the job, the terminal closing) would
train on in the background until their current run ends, holding its run dir's lock, so that running the
sweep again reports those runs BUSY instead of resuming them. So:

* while a multi-worker sweep waits for its workers, SIGTERM raises KeyboardInterrupt in it, as Ctrl-C does
  (:func:`sigterm_as_interrupt`), and on any interruption the sweep terminates its workers
  (:func:`terminate_workers`) before the CLI says "run the same command again to resume";
* every worker watches the process that started it (:func:`exit_with_parent`, the pool's initializer) and
  ends itself within a second of that process's death, also an abrupt one (SIGKILL, out of memory).

A run stopped mid-round resumes from its last checkpoint, with the results of an uninterrupted run.

:func:`cpu_oversubscription` is the sweep's warning when its CPU runs would take more threads at once than the
machine has cores; :func:`gpu_underuse` its note when runs on a GPU would go one at a time.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING

from tqdm import tqdm

from fedaug.runs.resume import finished_summary
from fedaug.runtime.device import DeviceError, resolve_device
from fedaug.runtime.interrupt import interrupt as interrupt
from fedaug.runtime.interrupt import sigterm_as_interrupt as sigterm_as_interrupt

if TYPE_CHECKING:
    from fedaug.sweeps.order import SweepPoint

PARENT_POLL_SECONDS = 0.5
"""How often a worker checks that its sweep still runs."""


def exit_with_parent(parent: int) -> None:
    """Pool initializer: ends this worker (SIGTERM to itself) once ``parent`` is no longer its parent.

    It also gives tqdm a thread lock instead of the multiprocessing lock tqdm makes by default: that lock is a
    named semaphore, and a worker terminated mid-run never releases it, so the sweep's Ctrl-C ended with
    Python's "resource_tracker: There appear to be N leaked semaphore objects" warning.
    """
    tqdm.set_lock(threading.RLock())

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def terminate_workers(pool: ProcessPoolExecutor, timeout: float = 10.0) -> int:
    """Terminates ``pool``'s worker processes (SIGTERM, then SIGKILL after ``timeout`` s) and shuts it down
    without waiting for their futures; returns how many were alive."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    alive = [p for p in processes if p.is_alive()]
    for process in alive:
        process.terminate()
    deadline = time.monotonic() + timeout
    for process in alive:
        process.join(max(deadline - time.monotonic(), 0.0))
        if process.is_alive():
            process.kill()
            process.join()
    pool.shutdown(wait=False, cancel_futures=True)
    return len(alive)


def cpu_oversubscription(points: Sequence[SweepPoint], workers: int) -> str | None:
    """A warning when the unfinished CPU runs of a sweep would use more threads at once than this machine has
    cores (each run then goes slower and the sweep as a whole no faster), else None. GPU runs are not counted:
    their workers mostly wait for the device."""
    cpu = _unfinished_on(points, "cpu")
    if not cpu:
        return None
    threads = max(p.config.engine.num_threads or 1 for p in cpu)
    at_once = min(workers, len(cpu)) * threads
    cores = usable_cores()
    if at_once <= cores:
        return None
    return (
        f"--workers {workers} with engine.num_threads={threads} runs {at_once} threads on this machine's "
        f"{cores} CPU cores: the runs share cores, so each goes slower and the sweep ends no sooner "
        f"(--workers {max(1, cores // threads)} fits)"
    )


def gpu_underuse(points: Sequence[SweepPoint], workers: int) -> str | None:
    """A note when a sweep would train its unfinished GPU runs one at a time (``--workers 1``), else None.

    A HARNet run alone leaves a GPU mostly idle (each step is a few microseconds of arithmetic per kernel), so
    several runs sharing it finish sooner: on an H100, 16 at once ran FLea Table 1's 36 FedAvg/FLea runs in
    223 s, about 2-3 GiB of GPU memory each. Each worker also needs a CPU core to feed the GPU.
    """
    if workers > 1:
        return None
    gpu = _unfinished_on(points, "cuda")
    if len(gpu) < 2:
        return None
    fits = min(len(gpu), usable_cores(), 16)
    return (
        f"{len(gpu)} runs on a GPU one at a time: --workers {fits} runs {fits} at once on it, which finishes "
        "sooner (each run alone leaves the GPU mostly idle; each takes about 2-3 GiB of its memory with the "
        "default preset; docs/guide/gpu.md)"
    )


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS tells it, else all)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _unfinished_on(points: Sequence[SweepPoint], kind: str) -> list[SweepPoint]:
    """The points not finished yet whose ``engine.device`` is of ``kind`` (``cpu`` or ``cuda``) here; each
    distinct device name is resolved once (a device this machine lacks is of neither kind)."""
    names = {name for name in {p.config.engine.device for p in points} if _kind(name) == kind}
    return [
        p
        for p in points
        if p.config.engine.device in names and finished_summary(p.run_dir, p.config.train.rounds) is None
    ]


def _kind(device: str) -> str | None:
    """``engine.device``'s device type here (None for a device this machine lacks)."""
    try:
        return resolve_device(device).type
    except DeviceError:
        return None
