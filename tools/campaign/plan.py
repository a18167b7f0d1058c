"""Which of a campaign's runs one command starts: the grids' points not archived yet, in the campaign's order,
as many as the budget holds when they run longest first, ``workers`` at a time.

The wall time of a set of runs is the makespan of handing them, longest first, to ``workers`` slots
(:func:`fedaug.sweeps.order.makespan`); the selection adds points in list order while that stays within the
budget. A point that does not fit (or whose cost is unknown) is passed over, and later points that still fit
the time left are taken (backfill: a 35-minute run in the hour a 90-minute run cannot use), so the list is
worked through in order across commands and no worker idles while a shorter run fits. With ``--advance``
the first point that does not fit is started instead, after the others, and stops at the budget
(resumable); nothing is taken after it. At most :data:`MAX_STUDIES` studies per command (fewer when
asked), one archive each: a lent GPU machine returns at most 8 files, and the log and the timing summary
are two of them.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fedaug.sweeps.order import SweepPoint, makespan
from tools.campaign import MAX_STUDIES
from tools.campaign.ledger import Ledger, point_identity
from tools.campaign.spec import Campaign, Grid, grid_points

logger = logging.getLogger(__name__)


@dataclass
class Pending:
    """A grid point not archived yet and its estimated cost on the campaign's device kind (None: unknown)."""

    grid: Grid
    point: SweepPoint
    cost: float | None
    advances: bool = False
    """Chosen by ``--advance`` although it cannot finish in the budget: it runs until the budget ends and
    resumes next time (scheduled last, whatever its cost)."""


@dataclass
class GridState:
    """One grid's points: ``done`` (archived: where), and the ``pending`` ones in list order."""

    grid: Grid
    total: int
    done: dict[Path, Path] = field(default_factory=dict)
    pending: list[Pending] = field(default_factory=list)
    spent: dict[Path, float] = field(default_factory=dict)
    """The archived runs (path) that ran on the campaign's device kind and their logged rounds' seconds."""


def grid_states(
    campaign: Campaign, ledger: Ledger, runs_dir: Path, kind: str, extra: Sequence[str] = ()
) -> list[GridState]:
    """Every grid's archived and pending points (``extra``: ``--set`` overrides for every grid). A point whose
    run (its identity) is already pending in an earlier grid of the order, such as a pilot's run that is also
    a point of the grid it chooses for, is not pending twice: it runs once, in the earlier grid, and counts
    as done in both once archived (the ledger finds runs by identity)."""
    states = []
    queued: dict[str, Path] = {}
    for grid in campaign.in_order(kind):
        points = grid_points(grid, runs_dir, extra)
        state = GridState(grid, len(points))
        for point in points:
            found = ledger.archived(point)
            if found is not None:
                state.done[point.run_dir] = found
                seconds = ledger.spent(found, kind)
                if seconds is not None:
                    state.spent[found] = seconds
                continue
            key = point_identity(point)
            if key in queued:
                logger.debug("%s: %s runs as %s", grid.name, point.run_dir, queued[key])
                continue
            queued[key] = point.run_dir
            state.pending.append(Pending(grid, point, ledger.cost(point, grid, kind)))
        states.append(state)
    return states


def select(
    states: Sequence[GridState],
    budget: float,
    workers: int,
    skip: Sequence[str] = (),
    max_studies: int = MAX_STUDIES,
    advance: bool = False,
    taken: Collection[str] = (),
) -> list[Pending]:
    """The pending points that run now (module docstring): in order, each that fits the budget with those
    chosen before it, the others passed over; grids named in ``skip`` (data missing) are passed over;
    ``max_studies``: archives this command may write (fewer when other files share the 8; a point of
    another study is then passed over); ``advance``: instead, the first point that does not fit is chosen
    too (:attr:`Pending.advances`) and the selection ends there, so that a budget shorter than the next
    run still moves it on (it stops at the budget and resumes next time);
    ``taken``: studies that earlier choices of the same command already write an archive for."""
    chosen: list[Pending] = []
    studies: set[str] = set(taken)
    for state in states:
        if state.grid.name in skip:
            continue
        for item in state.pending:
            if item.cost is None:
                logger.info(
                    "%s: no cost estimate for %s (cost_s in the campaign file)",
                    state.grid.name,
                    item.point.run_dir,
                )
                if advance:
                    return chosen
                continue
            if item.grid.study not in studies and len(studies) >= max_studies:
                continue
            if makespan([c.cost or 0.0 for c in chosen] + [item.cost], workers) > budget:
                if advance:
                    chosen.append(Pending(item.grid, item.point, item.cost, advances=True))
                    return chosen
                continue
            chosen.append(item)
            studies.add(item.grid.study)
    return chosen


def status_lines(states: Sequence[GridState], workers: int, kind: str) -> list[str]:
    """Per grid: runs done / total, the core-hours its archived runs spent on ``kind`` (their logged rounds,
    as measured on the hosts that ran them), the core-hours its pending runs take and their minutes,
    ``workers`` at once (longest first); then the whole campaign's (a run archived for two grids counted
    once)."""
    width = max([len(s.grid.name) for s in states] + [4]) + 2
    header = (
        f"{'grid':<{width}}{'done':>9}  {'spent':>7}  {'core-h':>7}  {kind} minutes left ({workers} at once)"
    )
    lines = [header]
    for state in states:
        done = f"{len(state.done)}/{state.total}"
        spent = f"{sum(state.spent.values()) / 3600:.1f}"
        hours, minutes = core_hours(state.pending), minutes_text(state.pending, workers)
        lines.append(f"{state.grid.name:<{width}}{done:>9}  {spent:>7}  {hours:>7}  {minutes}")
    done = f"{sum(len(s.done) for s in states)}/{sum(s.total for s in states)}"
    spent = f"{sum({p: t for s in states for p, t in s.spent.items()}.values()) / 3600:.1f}"
    known = [p for s in states for p in s.pending if p.cost is not None]
    lines.append(
        f"{'all':<{width}}{done:>9}  {spent:>7}  {core_hours(known):>7}  {minutes_text(known, workers)}"
    )
    return lines


def core_hours(pending: Sequence[Pending]) -> str:
    """The hours of one core (or one GPU slot) the estimated runs of ``pending`` take, one after another:
    what a CPU grid costs whatever the number of workers (``?``: none has an estimate)."""
    known = [p.cost for p in pending if p.cost is not None]
    return f"{sum(known) / 3600:.1f}" if known or not pending else "?"


def minutes_text(pending: Sequence[Pending], workers: int) -> str:
    """The minutes ``pending`` takes, ``workers`` at once, longest first (``?``: no run has an estimate),
    and how many runs have none: ``18.4``, ``? (+3 runs without an estimate)``."""
    known = [p.cost for p in pending if p.cost is not None]
    left = f"{makespan(known, workers) / 60:.1f}" if known or not pending else "?"
    missing = len(pending) - len(known)
    return left + (f" (+{missing} runs without an estimate)" if missing else "")
