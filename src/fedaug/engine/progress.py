"""Time left in a run and in the whole command, for the per-round progress line: the median of the last few
rounds times the rounds left.

A recent window, not the run's mean, because the cost of a round can change within a run: Fed-ZDAC/ZDAS
rounds from ``start_round`` on cost 20x a FedAvg round (zero-shot generation); FedGen's grow late in a run.
Its median, not its mean, so that one slow round (the first, or one while another process held a core) does
not stretch the estimate once three rounds are in.

:class:`JobEta` carries what the command runs after the current run (``fedaug run`` of several methods), so
that the line ends with the whole job's time left (``job eta 38m``): a later run is costed by its seeds'
measured round times when it has them, else by the current run's round time converted to FedAvg's and
multiplied by the later method's round ratio (:mod:`fedaug.sweeps.round_ratio`).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

WINDOW = 5
"""Rounds averaged for the estimate."""


class RoundClock:
    """Keeps the last :data:`WINDOW` round times; :meth:`eta` estimates the seconds left."""

    def __init__(self, window: int = WINDOW) -> None:
        self._recent: deque[float] = deque(maxlen=window)

    def add(self, seconds: float) -> None:
        self._recent.append(seconds)

    def typical(self) -> float | None:
        """The median of the recent round times (None before any round)."""
        return statistics.median(self._recent) if self._recent else None

    def eta(self, rounds_left: int) -> float:
        """Median of the recent round times x ``rounds_left`` (0 before any round or when none is left)."""
        typical = self.typical()
        if typical is None or rounds_left <= 0:
            return 0.0
        return typical * rounds_left


@dataclass(frozen=True)
class LaterRun:
    """A run the command runs after the current one: its method, the rounds it has left, its time left by its
    own seeds' round times (None: none timed) and its round time over FedAvg's (None: not known)."""

    method: str
    rounds: int
    seconds: float | None = None
    ratio: float | None = None


@dataclass(frozen=True)
class JobEta:
    """What follows the current run in the command, and the current run's round time over FedAvg's (``ratio``;
    None: not known, so later runs without their own timings cannot be costed from it)."""

    later: tuple[LaterRun, ...] = ()
    ratio: float | None = 1.0

    def later_seconds(self, round_seconds: float | None) -> tuple[float, list[str]]:
        """The later runs' time, and the methods it could not cost: each run by its own seeds' times, else by
        the current run's typical round time (``round_seconds``) over ``ratio`` (one FedAvg round) times the
        run's ratio and rounds."""
        fedavg = None if round_seconds is None or not self.ratio else round_seconds / self.ratio
        total, untimed = 0.0, []
        for run in self.later:
            if run.seconds is not None:
                total += run.seconds
            elif run.ratio is not None and fedavg is not None:
                total += fedavg * run.ratio * run.rounds
            else:
                untimed.append(run.method)
        return total, untimed

    def text(self, run_left: float, round_seconds: float | None) -> str:
        """``job eta 38m`` (``run_left``: the current run's time left), or ``job eta >12m (moon not yet
        timed)``."""
        later, untimed = self.later_seconds(round_seconds)
        text = f"job eta {format_duration(run_left + later)}"
        if untimed:
            names = ", ".join(untimed) if len(untimed) <= 3 else f"{len(untimed)} runs"
            return f"job eta >{text.removeprefix('job eta ')} ({names} not yet timed)"
        return text


def format_duration(seconds: float) -> str:
    """``42s``, ``6m05s`` or ``1h02m`` (rounded down to the unit shown)."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
