"""How long a sweep's unfinished points will take: the estimate that ``fedaug sweep --dry-run`` prints.

A point's remaining rounds are those after the rounds its ``metrics.jsonl`` holds; a point that branches from
its FedAvg run skips the FedAvg rounds it takes from it (:func:`~fedaug.runs.branch.branch_plan`),
unless that run has finished without a checkpoint to start from (restored from an archive): then it runs
them too (:func:`plan`).
Each remaining round is costed at the mean ``round_time`` (``timings.jsonl``) of that round over the point's
siblings: the run dirs of the same sweep name, setting and method with any seed (``.../<method>/seed*``, the
point's own included), finished or not; a round none of them has logged yet, at the mean of the logged rounds
of the kind the point runs itself (a branched run's copied FedAvg rounds carry FedAvg's times, which never
cost its own rounds). A point whose siblings have logged none of its own rounds is costed at FedAvg's mean
round time on its setting times the method's round ratio (:mod:`fedaug.sweeps.round_ratio`: recorded on
the setting, else fedaug's default); without either it gets no estimate. The times are those of the machine
and the load the siblings ran under; the sum is run time, which ``--workers`` processes share when the
machine has a core for each.

:func:`job_plan` (``fedaug run`` of several methods) and :func:`sweep_job` (a sweep in one process) give each
run what the command runs after it (:class:`~fedaug.engine.progress.JobEta`), so that every round line ends
with the whole job's time left, from the first round on.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fedaug.config.identity import run_dir_for
from fedaug.engine.checkpoint import logged_round_times, read_jsonl
from fedaug.engine.progress import JobEta, LaterRun
from fedaug.runs.branch import branch_plan, has_start_checkpoint
from fedaug.runs.resume import finished_summary
from fedaug.runtime.machine import cpu_model, other_recorded_cpu
from fedaug.sweeps.archived import STUDIES_ENV
from fedaug.sweeps.order import Schedule, SweepPoint, wall_seconds
from fedaug.sweeps.round_ratio import mean_round_time, round_ratio

if TYPE_CHECKING:
    from fedaug.config.schema import ExperimentConfig
    from fedaug.sweeps.archived import ArchiveTimes


def round_times(method_dir: Path) -> dict[int, float]:
    """Mean ``round_time`` (s) per round over the run dirs ``method_dir/seed*`` that logged it."""
    samples: dict[int, list[float]] = defaultdict(list)
    for run_dir in sorted(method_dir.glob("seed*")):
        for round_num, seconds in logged_round_times(run_dir):
            samples[round_num].append(seconds)
    return {round_num: statistics.fmean(times) for round_num, times in samples.items()}


@dataclass(frozen=True)
class Plan:
    """What a point has left to run.

    ``done``: the rounds its ``metrics.jsonl`` holds; ``own``: its own kind of rounds (after its FedAvg
    rounds, if it has any); ``needed``: the rounds it has still to run, its FedAvg rounds included when it
    runs them itself; ``alone``: the FedAvg run dir it could branch from but will not (None: it does not
    branch, or will, or did).
    """

    done: int
    own: range
    needed: range
    alone: Path | None


def plan(point: SweepPoint) -> Plan:
    """``point``'s :class:`Plan`.

    A branching point runs FedAvg's rounds itself when its FedAvg run holds no checkpoint to start from and
    will not write one: a finished run restored from ``fedaug archive`` (which keeps no checkpoints). A
    FedAvg run that has not finished is taken to leave its checkpoint (the sweep that holds both runs it
    first, with the preset's ``engine.keep_checkpoints``). A point that has started already branched if its
    run dir has ``branch.json``.
    """
    branch = branch_plan(point.config)
    done = rounds_logged(point)
    alone = None
    if branch is not None:
        source, fedavg_rounds = branch
        if done:
            alone = None if (point.run_dir / "branch.json").exists() else source
        elif (
            not has_start_checkpoint(source, fedavg_rounds)
            and finished_summary(source, point.config.train.rounds) is not None
        ):
            alone = source
    own = range(1 if branch is None else branch[1] + 1, point.config.train.rounds + 1)
    first = 1 if alone is not None else own.start
    return Plan(done, own, range(max(done + 1, first), own.stop), alone)


def rounds_logged(point: SweepPoint) -> int:
    """The rounds ``point``'s ``metrics.jsonl`` holds (0: not started)."""
    return len(read_jsonl(point.run_dir / "metrics.jsonl"))


def run_status(point: SweepPoint) -> str:
    """``finished``, ``partial (r/R rounds)`` or ``new``, from the files in the point's run dir."""
    rounds = point.config.train.rounds
    if finished_summary(point.run_dir, rounds) is not None:
        return "finished"
    done = rounds_logged(point)
    return f"partial ({done}/{rounds} rounds)" if done else "new"


def remaining_rounds(point: SweepPoint) -> range:
    """The rounds ``point`` has still to run itself."""
    return plan(point).needed


def remaining_seconds(point: SweepPoint, point_plan: Plan | None = None) -> float | None:
    """Run time (s) ``point`` still needs by its siblings' round times (None: no sibling has logged a round
    that ``point`` runs itself); ``point_plan`` is ``plan(point)`` if the caller has it.

    A round no sibling has logged yet (the next rounds of the most advanced one) is costed at the mean time of
    the logged rounds among those ``point`` runs itself, so that a branching point's remaining rounds are
    costed by augmented rounds, not by FedAvg's.
    """
    point_plan = point_plan or plan(point)
    own, needed = point_plan.own, point_plan.needed
    if not needed:
        return 0.0
    times = round_times(point.run_dir.parent)
    logged_own = [seconds for round_num, seconds in times.items() if round_num in own]
    if not logged_own:
        return None
    fallback = statistics.fmean(logged_own)
    return math.fsum(times.get(round_num, fallback) for round_num in needed)


@dataclass(frozen=True)
class Estimate:
    """A point's run time left and where it comes from.

    ``source``: ``seeds`` (its seeds' round times, :func:`remaining_seconds`), ``archive`` (archived runs
    of its setting, :mod:`fedaug.sweeps.archived`), ``ratio`` (FedAvg's round here or archived, times the
    method's round ratio) or ``none`` (``seconds`` None); ``note``: the source in words, for the plan's line.
    """

    seconds: float | None
    source: str
    note: str = ""


def estimate(
    point: SweepPoint, point_plan: Plan | None = None, archive: ArchiveTimes | None = None
) -> Estimate:
    """``point``'s :class:`Estimate`: by its seeds' round times; else by the archived runs of its setting
    (``archive``); else FedAvg's mean round time on its setting (here, else archived) times the method's round
    ratio (:func:`.round_ratio.round_ratio`) times its rounds left; else none."""
    point_plan = point_plan or plan(point)
    seconds = remaining_seconds(point, point_plan)
    if seconds is not None:
        return Estimate(seconds, "seeds")
    rounds = len(point_plan.needed)
    found = None if archive is None else archive.round_time(point.config)
    if found is not None:
        return Estimate(found.seconds * rounds, "archive", found.describe())
    ratio = round_ratio(point.config, point.run_dir.parents[1], point_plan.own)
    if ratio is None:
        return Estimate(None, "none")
    fedavg = mean_round_time(point.run_dir.parents[1] / "fedavg")
    if fedavg is not None:
        note = f"{ratio[0]:.2f}x FedAvg's round, {_RATIO_SOURCE[ratio[1]]}"
        return Estimate(fedavg * ratio[0] * rounds, "ratio", note)
    found = None if archive is None else archive.round_time(point.config, method="fedavg")
    if found is None:
        return Estimate(None, "none")
    note = f"{ratio[0]:.2f}x FedAvg's round ({_RATIO_SOURCE[ratio[1]]}) {found.describe('FedAvg here')}"
    return Estimate(found.seconds * ratio[0] * rounds, "ratio", note)


def estimated_seconds(point: SweepPoint, point_plan: Plan | None = None) -> float | None:
    """:func:`estimate`'s seconds without the archive: by its seeds' round times, else FedAvg's mean round
    time on its setting times the method's round ratio; None when neither is known."""
    return estimate(point, point_plan).seconds


def sweep_job(
    current: SweepPoint,
    later: Sequence[SweepPoint],
    archive: ArchiveTimes | None = None,
    known: Callable[[SweepPoint], float | None] | None = None,
) -> JobEta:
    """What a sweep run in one process runs after ``current`` (the ``later`` points not started yet), for
    its round lines' ``job eta``: each unfinished point by :func:`estimated_seconds`; one of ``current``'s
    setting without an estimate by the current run's round time and the ratios; any other by the archived
    runs of its setting (``archive``, :func:`estimate`), else by the caller's own estimate (``known``: the
    schedule's, e.g. the campaign's plan; None or 0: unknown); without one: not yet timed."""
    setting = current.run_dir.parents[1]
    runs = []
    for point in later:
        if run_status(point) == "finished":
            continue
        point_plan = plan(point)
        if not point_plan.needed:
            continue
        same = point.run_dir.parents[1] == setting
        ratio = round_ratio(point.config, setting, point_plan.own) if same else None
        seconds = estimated_seconds(point, point_plan)
        if seconds is None and ratio is None and archive is not None:
            seconds = estimate(point, point_plan, archive).seconds
        if seconds is None and ratio is None and known is not None:
            seconds = known(point) or None  # 0: a schedule's placeholder for a point it cannot cost
        ratio_value = None if ratio is None else ratio[0]
        runs.append(LaterRun(point.config.method.name, len(point_plan.needed), seconds, ratio_value))
    own = round_ratio(current.config, setting, plan(current).own)
    return JobEta(tuple(runs), ratio=None if own is None else own[0])


def format_duration(seconds: float) -> str:
    """``45 s``, ``57 min`` or ``21.9 h``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def dry_run_lines(
    points: Sequence[SweepPoint],
    *,
    workers: int = 1,
    order: str = "grid",
    archive: ArchiveTimes | None = None,
) -> list[str]:
    """One line per point (status, time left, run dir, the FedAvg run it waits for, where an estimate not by
    its seeds comes from), then the host probe's line if one was taken, then a summary line; with ``workers``
    > 1 the summary gives the wall time of the sweep's order on that many processes
    (:func:`~fedaug.sweeps.order.wall_seconds`) beside the run time."""
    waits = Schedule(points).waits_for()
    lines = []
    counts: dict[str, int] = defaultdict(int)
    sources: dict[str, int] = defaultdict(int)
    seconds_of: dict[Path, float | None] = {}
    for point in points:
        status = run_status(point)
        counts[status.split(" ")[0]] += 1
        point_plan = None if status == "finished" else plan(point)
        found = Estimate(0.0, "seeds") if point_plan is None else estimate(point, point_plan, archive)
        seconds_of[point.run_dir] = found.seconds
        sources[found.source] += status != "finished"
        if status == "finished":
            left = ""
        elif found.seconds is None:
            left = "?"
        else:
            left = f"~{format_duration(found.seconds)}"
        if point_plan is not None and point_plan.alone is not None:
            source = point_plan.alone
            after = f"  (from round 1: no FedAvg checkpoint in {source}{_other_cpu(source)})"
        else:
            after = f"  (after {waits[point.run_dir]})" if point.run_dir in waits else ""
        if found.note and status != "finished":
            after += f"  ({found.note})"
        lines.append(f"{status:<26}{left:<10}{point.run_dir}{after}")
    if archive is not None and (probe := archive.probe_line()) is not None:
        lines.append(probe)
    lines.append(_summary(points, counts, sources, seconds_of, workers, order, archive))
    return lines


def _summary(
    points: Sequence[SweepPoint],
    counts: Mapping[str, int],
    sources: Mapping[str, int],
    seconds_of: Mapping[Path, float | None],
    workers: int,
    order: str,
    archive: ArchiveTimes | None,
) -> str:
    """:func:`dry_run_lines`' last line."""
    unknown, left = sources["none"], counts["partial"] + counts["new"]
    summary = f"{_runs(len(points))}: {', '.join(f'{counts[s]} {s}' for s in _STATES if counts[s])}"
    if unknown and unknown == left:
        return f"{summary}; {NO_ESTIMATE}{_no_archive(archive)}"
    if not left:
        return summary
    total = math.fsum(seconds for seconds in seconds_of.values() if seconds is not None)
    summary += f"; about {format_duration(total)} of run time left ({_sources(sources)})"
    if workers > 1:
        wall = wall_seconds(points, lambda p: seconds_of[p.run_dir], workers, order)
        summary += f", about {format_duration(wall)} of wall time on {workers} workers (--order {order})"
    if unknown:
        summary += f"; {_runs(unknown)} without an estimate ('?': no seed has logged that kind of round)"
    return summary


def _no_archive(archive: ArchiveTimes | None) -> str:
    """Why the archive gave no estimate either: none found, or none of these settings in it."""
    if archive is None:
        return f" (and no archived runs: no studies/ found, ${STUDIES_ENV} names one)"
    return f" (nor has any run archived in {archive.archive.studies} of their settings)"


_STATES = ("finished", "partial", "new")

NO_ESTIMATE = "no estimate yet ('?' for each: no seed of these runs has logged that kind of round)"
"""The summary of :func:`dry_run_lines` when no unfinished run has an estimate (a fresh checkout)."""

_SOURCE_WORDS = {
    "seeds": "round times of their seeds so far",
    "archive": "archived runs of their setting",
    "ratio": "FedAvg's round time times the method's round ratio",
}


def _sources(sources: Mapping[str, int]) -> str:
    """``round times of their seeds so far`` or, with other sources, ``3 by ..., 5 by ...``."""
    used = [source for source in _SOURCE_WORDS if sources.get(source)]
    if used == ["seeds"]:
        return _SOURCE_WORDS["seeds"]
    return ", ".join(f"{sources[source]} by {_SOURCE_WORDS[source]}" for source in used)


@dataclass(frozen=True)
class JobPlan:
    """What ``fedaug run`` of several methods prints before its first run, and says while each runs.

    ``lines``: the order of the runs, :func:`dry_run_lines` (status, time left and run dir of each), then the
    whole job's estimate (:func:`job_line`). ``jobs``: per run, what the command runs after it and the run's
    round ratio, from which its progress lines end with the job's time left (``job eta 38m``).
    """

    lines: list[str]
    jobs: list[JobEta]


def job_plan(
    configs: Sequence[ExperimentConfig], *, fresh: bool = False, archive: ArchiveTimes | None = None
) -> JobPlan:
    """The :class:`JobPlan` of running ``configs`` one after the other (``fresh``: each starts over), each
    run estimated by :func:`estimate` (``archive``: the archived runs' round times, if any)."""
    points = [SweepPoint(config, run_dir_for(config), {}) for config in configs]
    names = ", then ".join(config.method.name for config in configs)
    redo = "; --fresh starts each over" if fresh else ""
    lines = [
        f"plan: {_runs(len(points))}, one after the other: {names}{redo}",
        *dry_run_lines(points, archive=archive),
    ]
    runs: list[LaterRun | None] = []
    estimates: list[Estimate] = []
    ratios: list[tuple[float, str] | None] = []
    for point in points:
        point_plan = plan(point)
        if fresh:  # every round again, costed by its seeds' times (its own included) all the same
            first = 1 if point_plan.alone is not None else point_plan.own.start
            point_plan = Plan(0, point_plan.own, range(first, point_plan.own.stop), point_plan.alone)
        elif finished_summary(point.run_dir, point.config.train.rounds) is not None:
            point_plan = Plan(point_plan.done, point_plan.own, range(0), None)
        ratio = round_ratio(point.config, point.run_dir.parents[1], point_plan.own)
        ratios.append(ratio)
        rounds = len(point_plan.needed)
        found = estimate(point, point_plan, archive) if rounds else Estimate(None, "none")
        estimates.append(found)
        # a run with a round ratio follows the running run's round times once they come (this host, its
        # load) rather than a fixed estimate; one without, the archive's
        fixed = found.seconds if found.source == "seeds" or ratio is None else None
        later = LaterRun(point.config.method.name, rounds, fixed, None if ratio is None else ratio[0])
        runs.append(later if rounds else None)
    jobs = [
        JobEta(tuple(r for r in runs[i + 1 :] if r), ratio=None if ratio is None else ratio[0])
        for i, ratio in enumerate(ratios)
    ]
    lines.append(job_line(points, runs, ratios, estimates))
    return JobPlan(lines, jobs)


def job_line(
    points: Sequence[SweepPoint],
    runs: Sequence[LaterRun | None],
    ratios: Sequence[tuple[float, str] | None],
    estimates: Sequence[Estimate],
) -> str:
    """The plan's last line: the whole job's run time, each run by its :func:`estimate` (and where that
    comes from); without one, what the progress lines' ``job eta`` will go on."""
    parts, total, waiting, fedavg_untimed = [], 0.0, False, False
    for point, run, ratio, found in zip(points, runs, ratios, estimates, strict=True):
        if run is None:
            continue
        if found.seconds is not None:
            total += found.seconds
            note = found.note or "its seeds' round times"
            parts.append(f"{run.method} ~{format_duration(found.seconds)} ({note})")
            continue
        waiting = True
        fedavg_untimed = fedavg_untimed or mean_round_time(point.run_dir.parents[1] / "fedavg") is None
        if ratio is None:
            parts.append(f"{run.method} once its first round is timed (no round ratio to FedAvg known)")
        elif run.method == "fedavg":
            parts.append("fedavg by its own rounds")
        else:
            parts.append(f"{run.method} at {ratio[0]:.2f}x FedAvg's round ({_RATIO_SOURCE[ratio[1]]})")
    if not parts:
        return "job: nothing left to run"
    if not waiting:
        return f"job: about {format_duration(total)} of run time: {'; '.join(parts)}"
    why = " (no FedAvg round of this setting timed here)" if fedavg_untimed else ""
    return (
        f"job: no estimate before the first round{why}; then each round's line ends with the job's time "
        f"left: {'; '.join(parts)}"
    )


_RATIO_SOURCE = {"recorded": "recorded on this setting", "default": "fedaug's default"}
"""How :func:`job_line` names where a round ratio comes from (:func:`.round_ratio.round_ratio`)."""


def _other_cpu(fedavg_dir: Path) -> str:
    """``"; it ran on <CPU>, this is <CPU>: ..."`` when the FedAvg run's ``env.json`` names another CPU
    model: the repeated rounds will not be its bit for bit (``branch_from_fedavg`` warns too)."""
    there = other_recorded_cpu(fedavg_dir)
    return "" if there is None else f"; it ran on {there}, this is {cpu_model()}: not bit-identical"


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def running_line(points: Sequence[SweepPoint]) -> str:
    """``running: <run dir> round r/R (~t left); ...``: what a sweep with several workers logs between its
    per-run lines, whose workers log no rounds (their lines would interleave). ``r`` counts the rounds of the
    run's ``metrics.jsonl``; the time left is :func:`remaining_seconds`' (none before a sibling has timed the
    run's kind of round)."""
    parts = []
    for point in points:
        point_plan = plan(point)
        seconds = remaining_seconds(point, point_plan)
        left = "" if seconds is None else f" (~{format_duration(seconds)} left)"
        parts.append(f"{point.run_dir} round {point_plan.done}/{point.config.train.rounds}{left}")
    return "running: " + "; ".join(parts)
