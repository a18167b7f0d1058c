"""A sweep's points (:class:`SweepPoint`) and their order: a run that branches from a FedAvg run of the same
sweep waits for that run.

With ``engine.branch_from_fedavg`` a Fed-ZDAC/ZDAS, FedGen or post-hoc CCVR run starts from the checkpoint of
its FedAvg sibling (:mod:`fedaug.experiments.branching`), but only if the checkpoint is there when it starts;
otherwise it runs FedAvg's rounds itself (the same results, about 5x the time for Fed-ZDA). A sweep over
methods holds both, so it holds the branching run back until its FedAvg run has ended (finished, skipped or
failed), then starts it before any other waiting run, so that one sweep command (with any ``--workers``)
runs FedAvg and branches the others from it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedaug.api import RunContext
from fedaug.errors import FedaugError
from fedaug.experiments.config import ExperimentConfig
from fedaug.experiments.runner import build_method, fedavg_run_dir


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


def branch_source(config: ExperimentConfig) -> Path | None:
    """The run dir of the FedAvg run that ``config`` would start from, or None if it would not branch."""
    plan = branch_plan(config)
    return None if plan is None else plan[0]


def branch_plan(config: ExperimentConfig) -> tuple[Path, int] | None:
    """The FedAvg run dir that ``config`` would start from and the number of FedAvg rounds it would take from
    it, or None if it would not branch.

    Decided before any data is loaded: the method's :meth:`~fedaug.api.Method.fedavg_rounds` is asked with a
    planning :class:`~fedaug.api.RunContext` that has the config's seed, rounds and K but no data facts
    (``num_classes`` 0, ``input_shape`` empty). A config the method cannot be built from is not held back (its
    run reports the error).
    """
    if not config.engine.branch_from_fedavg or config.method.name == "fedavg":
        return None
    try:
        method = build_method(config)
    except FedaugError:
        return None
    plan = RunContext(
        num_clients=config.partition.num_clients or 0,
        num_classes=0,
        input_shape=(),
        seed=config.seed,
        num_rounds=config.train.rounds,
    )
    rounds = method.fedavg_rounds(plan)
    if rounds == 0:
        return None
    return fedavg_run_dir(config), rounds


class Schedule:
    """Hands out a sweep's points in order, holding each branching point back until its FedAvg point ended.

    :meth:`next` gives a released point first (those are the long ones, whose FedAvg rounds are done), else
    the next point in the sweep's order, else None (everything left is waiting, or nothing is left);
    :meth:`ended` releases the points that waited for the given one.
    """

    def __init__(self, points: Sequence[SweepPoint]) -> None:
        in_sweep = {p.run_dir for p in points}
        self._ready: deque[SweepPoint] = deque()
        self._released: deque[SweepPoint] = deque()
        self._waiting: dict[Path, list[SweepPoint]] = {}
        for point in points:
            source = branch_source(point.config)
            if source is not None and source in in_sweep and source != point.run_dir:
                self._waiting.setdefault(source, []).append(point)
            else:
                self._ready.append(point)

    def waits_for(self) -> dict[Path, Path]:
        """Each held-back point's run dir and the FedAvg run dir it waits for."""
        return {p.run_dir: source for source, points in self._waiting.items() for p in points}

    def next(self) -> SweepPoint | None:
        if self._released:
            return self._released.popleft()
        if self._ready:
            return self._ready.popleft()
        return None

    def ended(self, point: SweepPoint) -> None:
        self._released.extend(self._waiting.pop(point.run_dir, []))
