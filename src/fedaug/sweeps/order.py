"""A sweep's points (:class:`SweepPoint`) and the order they run in: a run that branches from a FedAvg run of
the same sweep waits for that run.

With ``engine.branch_from_fedavg`` a Fed-ZDAC/ZDAS, FedGen or post-hoc CCVR run starts from the checkpoint of
its FedAvg sibling (:mod:`fedaug.runs.branch`), but only if the checkpoint is there when it starts;
otherwise it runs FedAvg's rounds itself (the same results, about 5x the time for Fed-ZDA). A sweep over
methods holds both, so it holds the branching run back until its FedAvg run has ended (finished, skipped or
failed), then starts it before any other waiting run, so that one sweep command (with any ``--workers``)
runs FedAvg and branches the others from it.

Order (``fedaug sweep --order``): ``grid`` hands the points out as the grid lists them (seeds first, so an
interrupted sweep has whole seeds done); ``longest-first`` hands out the point with the most run time left
by its siblings' round times (:func:`fedaug.sweeps.estimate.remaining_seconds`), points without an
estimate first in grid order (their runs give the others an estimate). With many workers on one GPU the long
runs then start early instead of forming a tail: replaying the H200 grid of ``studies/flea_table1_har``
through 16 workers gives 694 s against 838 s in grid order (``studies/speed/README.md``).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedaug.config.schema import ExperimentConfig
from fedaug.runs.branch import branch_source
from fedaug.sweeps.options import ORDERS as ORDERS


@dataclass(frozen=True)
class SweepPoint:
    """One config of a sweep.

    Attributes:
        config: the resolved config.
        run_dir: where it runs.
        values: the grid values that made this point (dotted keys, in grid order).
    """

    config: ExperimentConfig
    run_dir: Path
    values: dict[str, Any]


Cost = Callable[[SweepPoint], float | None]
"""Run time left of a point, in seconds (None: unknown)."""


class Schedule:
    """Hands out a sweep's points in order, holding each branching point back until its FedAvg point ended.

    :meth:`next` gives a released point first (those are the long ones, whose FedAvg rounds are done), else
    the next point in the sweep's order, else None (everything left is waiting, or nothing is left);
    :meth:`ended` releases the points that waited for the given one. With ``cost`` (run time left, None:
    unknown) the next point is the one with the most time left, points of unknown cost first in order.
    """

    def __init__(self, points: Sequence[SweepPoint], cost: Cost | None = None) -> None:
        self._cost = cost
        self._ready: deque[SweepPoint] = deque()
        self._released: deque[SweepPoint] = deque()
        self._waiting: dict[Path, list[SweepPoint]] = {}
        self._in_sweep: set[Path] = set()
        self._ended: set[Path] = set()
        self.add(points)

    def add(self, points: Sequence[SweepPoint]) -> None:
        """Adds ``points`` after those given so far: a point that branches from a FedAvg point of the sweep
        that has not ended waits for it."""
        self._in_sweep |= {p.run_dir for p in points}
        for point in points:
            source = branch_source(point.config)
            waits = source is not None and source != point.run_dir and source not in self._ended
            if waits and source in self._in_sweep:
                self._waiting.setdefault(source, []).append(point)
            else:
                self._ready.append(point)

    def estimate(self, point: SweepPoint) -> float | None:
        """The schedule's own run time left of ``point`` (its ``cost``; None: unknown or none given)."""
        return None if self._cost is None else self._cost(point)

    def waits_for(self) -> dict[Path, Path]:
        """Each held-back point's run dir and the FedAvg run dir it waits for."""
        return {p.run_dir: source for source, points in self._waiting.items() for p in points}

    def next(self) -> SweepPoint | None:
        if self._released:
            return self._released.popleft()
        if not self._ready:
            return None
        if self._cost is None:
            return self._ready.popleft()
        pick, most = 0, -1.0
        for i, point in enumerate(self._ready):
            cost = self._cost(point)
            if cost is None:  # unknown: the first of these goes now, the others need not be costed
                pick = i
                break
            if cost > most:  # ties: the earlier in grid order
                pick, most = i, cost
        point = self._ready[pick]
        del self._ready[pick]
        return point

    def ended(self, point: SweepPoint) -> None:
        self._ended.add(point.run_dir)
        self._released.extend(self._waiting.pop(point.run_dir, []))


def makespan(costs: Sequence[float], workers: int) -> float:
    """Seconds until the last of ``costs`` ends when they are handed longest first to ``workers`` slots."""
    slots = [0.0] * max(1, min(workers, len(costs) or 1))
    for cost in sorted(costs, reverse=True):
        heapq.heappush(slots, heapq.heappop(slots) + cost)
    return max(slots)


def wall_seconds(points: Sequence[SweepPoint], cost: Cost, workers: int, order: str = "grid") -> float:
    """Seconds from the sweep's start to its last run's end on ``workers`` processes, each point taking
    ``cost(point)`` (None: 0), handed out as the sweep hands them out (:class:`Schedule` in ``order``, a
    branching point after its FedAvg point): what ``--dry-run --workers N`` prints as the wall time."""
    schedule = Schedule(points, cost if order == "longest-first" else None)
    running: list[tuple[float, int, SweepPoint]] = []  # (end, tie-break, point)
    now, started = 0.0, 0
    while True:
        while len(running) < max(1, workers) and (point := schedule.next()) is not None:
            heapq.heappush(running, (now + (cost(point) or 0.0), started, point))
            started += 1
        if not running:
            return now
        now, _, point = heapq.heappop(running)
        schedule.ended(point)
