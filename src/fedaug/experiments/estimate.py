"""How long a sweep's unfinished points will take: the estimate that ``fedaug sweep --dry-run`` prints.

A point's remaining rounds are those after the rounds its ``metrics.jsonl`` holds; a point that branches from
its FedAvg run skips the FedAvg rounds it takes from it (:func:`~fedaug.experiments.schedule.branch_plan`).
Each remaining round is costed at the mean ``round_time`` (``timings.jsonl``) of that round over the point's
siblings: the run dirs of the same sweep name, setting and method with any seed (``.../<method>/seed*``, the
point's own included), finished or not; a round none of them has logged yet, at the mean of the logged rounds
of the kind the point runs itself (a branched run's copied FedAvg rounds carry FedAvg's times, which never
cost its own rounds). A point whose siblings have logged none of its own rounds gets no estimate. The times
are those of the machine and the load the siblings ran under; the sum is run time, which ``--workers``
processes share when the machine has a core for each.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fedaug.engine.checkpoint import read_jsonl
from fedaug.experiments.schedule import Schedule, branch_plan

if TYPE_CHECKING:
    from fedaug.experiments.sweep import SweepPoint


def round_times(method_dir: Path) -> dict[int, float]:
    """Mean ``round_time`` (s) per round over the run dirs ``method_dir/seed*`` that logged it."""
    samples: dict[int, list[float]] = defaultdict(list)
    for run_dir in sorted(method_dir.glob("seed*")):
        for record in read_jsonl(run_dir / "timings.jsonl"):
            samples[int(record["round"])].append(float(record["round_time"]))
    return {round_num: statistics.fmean(times) for round_num, times in samples.items()}


def _rounds(point: SweepPoint) -> tuple[range, range]:
    """The rounds ``point`` runs itself (after the FedAvg rounds it would take from its FedAvg run), and those
    of them it has still to run."""
    plan = branch_plan(point.config)
    own = range(1 if plan is None else plan[1] + 1, point.config.train.rounds + 1)
    done = len(read_jsonl(point.run_dir / "metrics.jsonl"))
    return own, range(max(done + 1, own.start), own.stop)


def remaining_rounds(point: SweepPoint) -> range:
    """The rounds ``point`` has still to run itself."""
    return _rounds(point)[1]


def remaining_seconds(point: SweepPoint) -> float | None:
    """Run time (s) ``point`` still needs by its siblings' round times (None: no sibling has logged a round
    that ``point`` runs itself).

    A round no sibling has logged yet (the next rounds of the most advanced one) is costed at the mean time of
    the logged rounds among those ``point`` runs itself, so that a branching point's remaining rounds are
    costed by augmented rounds, not by FedAvg's.
    """
    own, needed = _rounds(point)
    if not needed:
        return 0.0
    times = round_times(point.run_dir.parent)
    logged_own = [seconds for round_num, seconds in times.items() if round_num in own]
    if not logged_own:
        return None
    fallback = statistics.fmean(logged_own)
    return math.fsum(times.get(round_num, fallback) for round_num in needed)


def format_duration(seconds: float) -> str:
    """``45 s``, ``57 min`` or ``21.9 h``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def dry_run_lines(points: Sequence[SweepPoint]) -> list[str]:
    """One line per point (status, time left, run dir, the FedAvg run it waits for), then a summary line."""
    from fedaug.experiments.sweep import run_status

    waits = Schedule(points).waits_for()
    lines = []
    counts: dict[str, int] = defaultdict(int)
    total, unknown = 0.0, 0
    for point in points:
        status = run_status(point)
        counts[status.split(" ")[0]] += 1
        seconds = None if status == "finished" else remaining_seconds(point)
        if status == "finished":
            left = ""
        elif seconds is None:
            left, unknown = "?", unknown + 1
        else:
            left, total = f"~{format_duration(seconds)}", total + seconds
        after = f"  (after {waits[point.run_dir]})" if point.run_dir in waits else ""
        lines.append(f"{status:<26}{left:<10}{point.run_dir}{after}")
    states = ", ".join(f"{counts[s]} {s}" for s in ("finished", "partial", "new") if counts[s])
    summary = f"{_runs(len(points))}: {states}"
    if counts["partial"] + counts["new"]:
        summary += f"; about {format_duration(total)} of run time left (round times of their seeds so far)"
        if unknown:
            summary += f"; {_runs(unknown)} without an estimate ('?': no seed has logged that kind of round)"
    lines.append(summary)
    return lines


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"
