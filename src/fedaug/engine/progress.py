"""Time left in a run, for the per-round progress line: the mean of the last few rounds times the rounds left.

A recent window, not the run's mean, because the cost of a round can change within a run: Fed-ZDAC/ZDAS
rounds from ``start_round`` on cost 20x a FedAvg round (zero-shot generation); FedGen's grow late in a run.
"""

from __future__ import annotations

from collections import deque

WINDOW = 5
"""Rounds averaged for the estimate."""


class RoundClock:
    """Keeps the last :data:`WINDOW` round times; :meth:`eta` estimates the seconds left."""

    def __init__(self, window: int = WINDOW) -> None:
        self._recent: deque[float] = deque(maxlen=window)

    def add(self, seconds: float) -> None:
        self._recent.append(seconds)

    def eta(self, rounds_left: int) -> float:
        """Mean of the recent round times x ``rounds_left`` (0 before any round or when none is left)."""
        if not self._recent or rounds_left <= 0:
            return 0.0
        return sum(self._recent) / len(self._recent) * rounds_left


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
