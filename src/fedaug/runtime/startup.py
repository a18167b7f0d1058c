"""Where a command's seconds go before its first round: the start-up, phase by phase.

A run's first round starts seconds after its process does (on an H100 a FedAvg run of the default preset took
20.8 s as the first run of a process, 12.5 s of it rounds). The code that does the work marks the end of each
phase (:func:`mark`); a phase's time is the span since the previous mark, summed when a phase comes back (a
``fedaug run`` of two methods checks both before it runs the first, and each check loads the data). The clock
starts when :mod:`fedaug` is imported; ``python_s`` is the time before that (the interpreter's own start and
``site``), read from ``/proc`` where there is one (Linux; None elsewhere). The engine takes the breakdown just
before the first round the process runs (:func:`take`) and writes it into that round's ``timings.jsonl``
record as ``startup``, logged once at INFO; later runs of the same process carry none (their start-up is not a
process's cold start).

Phases (those a command does not reach are absent): ``cli`` (argument parsing, the CLI's imports),
``imports`` (torch and the runner), ``config`` (YAML, overrides, checks), ``checks`` (every method of a
comparison checked before the first runs), ``command`` (what the caller did before its first run: a sweep's
planning, a script's own work; next to nothing for ``fedaug run``), ``run_dir`` (resume and identity
checks), ``device`` (the device resolved, deterministic mode set; on a GPU the CUDA context made),
``method``, ``data`` (the dataset loaded), ``partition``, ``model`` (built once and checked against the
method), ``record`` (the run dir's lock, ``config.yaml``, ``env.json``, a FedAvg branch), ``to_device`` (the
data moved to the run's device), ``engine_init`` (the initial model, the method's server state, its round-0
share) and ``other`` (between the last mark and the first round); ``fedaug flower simulate`` adds
``flower_imports`` (Flower and Ray imported), ``flower_setup`` (devices checked, data loaded, the ServerApp
made) and ``supernodes`` (Flower's runtime and Ray started, every SuperNode registered). They sum to
``total_s``, the seconds from ``import fedaug`` to the first round. CUDA's and cuDNN's first-use set-up
(kernels loaded, cuBLAS handles, algorithm choice) happens in the first round's own steps, so it shows as
round 1 taking longer than the next rounds, not here. ``torch._dynamo``, which ``torch.optim`` would import at
the first optimizer (1-5 s on a loaded CPU, once charged here as a phase of its own), is not imported at all
by a run that compiles nothing (:mod:`fedaug.runtime.lazy_dynamo`).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_IMPORTED_AT = time.perf_counter()


def process_age_s() -> float | None:
    """Seconds since this process started (Linux's ``/proc``, 10 ms resolution; None where unreadable)."""
    try:
        stat = Path("/proc/self/stat").read_text()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


_PYTHON_S = process_age_s()


class StartupClock:
    """Phase times since ``origin`` (a ``time.perf_counter`` reading), taken once."""

    def __init__(self, origin: float, python_s: float | None = None) -> None:
        self.origin = origin
        self.python_s = python_s
        self.phases: dict[str, float] = {}
        self.taken = False
        self._last = origin

    def mark(self, phase: str) -> None:
        """Ends ``phase`` now: the time since the previous mark is added to it (nothing once taken)."""
        if self.taken:
            return
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + (now - self._last)
        self._last = now

    def take(self) -> dict[str, Any] | None:
        """The breakdown (seconds): ``phases`` (``other`` up to now included), their sum ``total_s`` and
        ``python_s``; None when already taken."""
        if self.taken:
            return None
        self.mark("other")
        self.taken = True
        phases = {name: round(seconds, 4) for name, seconds in self.phases.items()}
        return {
            "phases": phases,
            "total_s": round(self._last - self.origin, 4),
            "python_s": None if self.python_s is None else round(self.python_s, 2),
        }


CLOCK = StartupClock(_IMPORTED_AT, _PYTHON_S)
"""This process's clock, started when :mod:`fedaug` was imported."""


def mark(phase: str) -> None:
    """Ends ``phase`` of this process's start-up (:meth:`StartupClock.mark`)."""
    CLOCK.mark(phase)


def take() -> dict[str, Any] | None:
    """This process's start-up breakdown, once (None on later calls); logged at INFO."""
    breakdown = CLOCK.take()
    if breakdown is not None:
        logger.info(describe(breakdown))
    return breakdown


def describe(breakdown: dict[str, Any]) -> str:
    """One line: ``start-up 3.10 s (python 0.05 s before it): imports 1.92, data 0.41, ...``, the largest
    phases first."""
    parts = sorted(breakdown["phases"].items(), key=lambda item: -item[1])
    before = "" if breakdown["python_s"] is None else f" (python {breakdown['python_s']:.2f} s before it)"
    listed = ", ".join(f"{name} {seconds:.2f}" for name, seconds in parts)
    return f"start-up {breakdown['total_s']:.2f} s{before}: {listed}"
