"""``fedaug campaign run``: one command that spends a time budget on the campaign's next runs.

It reads the campaign file and the archived runs (:mod:`tools.campaign.ledger`), checks that each grid's data
is on the machine and says how much of a lent machine's 64 MiB the tree and that data leave (the data step),
selects the pending points the budget holds (:mod:`tools.campaign.plan`), runs them longest first,
``workers`` at once, with :func:`~fedaug.sweeps.sweep.run_sweep` and stops them where the budget ends:
no run starts that its estimate says would end after it (:class:`BudgetSchedule`), and a run still going at
the end is terminated (it resumes from its last round in the same runs folder). It writes into ``out``:

* ``<study>.tar.gz`` per study with finished runs: ``<study>/runs/...`` as ``fedaug archive`` keeps them
  (config, env, summary, gzipped scalar metrics and timings; :func:`~fedaug.results.archive.archive_runs`),
  their floats rounded (:mod:`fedaug.results.compact`);
  a run that did not finish is never archived. They are rewritten each time a run ends, each replaced
  whole (:func:`write_archives`), so ``fedaug campaign import`` of ``out`` while the command still runs
  imports the runs finished so far, and a machine that ends mid-command (a session's end) loses only the
  runs still going;
* ``campaign.log``: the command's log;
* ``campaign_summary.json``: the plan, each run's status, estimate and measured seconds, the archives.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from fedaug.engine.checkpoint import logged_round_times
from fedaug.errors import ConfigError
from fedaug.results.archive import archive_runs
from fedaug.runs.resume import finished_summary
from fedaug.runtime.device import resolve_device
from fedaug.runtime.paths import check_folder_target
from fedaug.sweeps.estimate import format_duration, rounds_logged
from fedaug.sweeps.order import Schedule, SweepPoint
from fedaug.sweeps.probe import PROBE_ENV, given_or_measured
from fedaug.sweeps.sweep import run_sweep
from fedaug.sweeps.workers import usable_cores
from tools.campaign import MAX_STUDIES
from tools.campaign.ledger import Ledger
from tools.campaign.plan import GridState, Pending, grid_states, makespan, select
from tools.campaign.spec import Campaign, archive_path

logger = logging.getLogger(__name__)

MACHINE_LIMIT_MIB = 64.0
"""What a lent GPU machine takes of the working tree and the carried data together."""

LOG_NAME = "campaign.log"
SUMMARY_NAME = "campaign_summary.json"


class BudgetExpired(BaseException):
    """The campaign's budget ended while runs were going (a BaseException: no run catches it)."""


class BudgetSchedule(Schedule):
    """A :class:`Schedule` that starts no point whose estimated cost would end it after ``deadline``
    (``clock`` seconds); such points are left in :attr:`not_started`, the others' run dirs are in
    :attr:`started`. With ``refill``, a schedule that has handed out its points asks it for more when a
    worker is free (the next runs that fit the time left, so that a core whose run ended early does not
    wait for the other cores' runs); an empty answer ends the refills."""

    def __init__(
        self,
        points: Sequence[SweepPoint],
        cost: Callable[[SweepPoint], float],
        deadline: float,
        clock: Callable[[], float] = time.monotonic,
        refill: Callable[[], Sequence[SweepPoint]] | None = None,
        on_end: Callable[[SweepPoint], None] | None = None,
    ) -> None:
        super().__init__(points)
        self._estimate, self._deadline, self._clock = cost, deadline, clock
        self._refill, self._on_end = refill, on_end
        self.not_started: list[SweepPoint] = []
        self.started: set[Path] = set()

    def next(self) -> SweepPoint | None:
        while True:
            while (point := super().next()) is not None:
                if self._clock() + self._estimate(point) <= self._deadline:
                    self.started.add(point.run_dir)
                    return point
                logger.info("not started (would end after the budget): %s", point.run_dir)
                self.not_started.append(point)
            if self._refill is None or self.waits_for():  # held-back points: their FedAvg runs are going
                return None
            more = self._refill()
            if not more:
                self._refill = None  # the time left only shrinks: nothing later will fit either
                return None
            self.add(more)

    def estimate(self, point: SweepPoint) -> float | None:
        """The campaign's estimate of ``point`` (None for the advancing run, counted as 0 here)."""
        return self._estimate(point) or None

    def ended(self, point: SweepPoint) -> None:
        super().ended(point)
        if self._on_end is not None:
            self._on_end(point)


@contextlib.contextmanager
def hard_stop(seconds: float) -> Iterator[None]:
    """Raises :class:`BudgetExpired` in this (main) thread after ``seconds``; elsewhere, or without
    SIGALRM, does nothing."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise BudgetExpired

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def folder_bytes(path: Path, skip: Sequence[Path] = ()) -> int:
    """Bytes of the files under ``path`` (none of ``skip``'s)."""
    skipped = [s.resolve() for s in skip]
    total = 0
    for file in path.rglob("*"):
        if file.is_file() and not any(s == file.resolve() or s in file.resolve().parents for s in skipped):
            total += file.stat().st_size
    return total


def tree_bytes(root: Path, skip: Sequence[Path]) -> int:
    """Bytes of the tracked files of the git checkout at ``root``, or of every file under it (no ``.git``,
    none of ``skip``) where it is not one (a lent machine's copy)."""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True)
        names = [n for n in listed.stdout.decode().split("\0") if n]
        if names:
            return sum((root / n).stat().st_size for n in names if (root / n).is_file())
    except (OSError, subprocess.CalledProcessError):
        pass
    return folder_bytes(root, [root / ".git", *skip])


def data_step(states: Sequence[GridState], data_dir: Path, tree: int) -> tuple[list[str], dict[str, Any]]:
    """Which grids' data are here, and the room the tree and that data leave of :data:`MACHINE_LIMIT_MIB`:
    the names of the grids to skip (data missing) and a record for the summary."""
    skip, sizes = [], {}
    for state in states:
        if not state.pending:
            continue
        missing = [d for d in state.grid.data if not (data_dir / d).is_dir()]
        if missing:
            skip.append(state.grid.name)
            logger.info("%s skipped: no %s under %s", state.grid.name, ", ".join(missing), data_dir)
        for name in state.grid.data:
            if name not in missing and name not in sizes:
                sizes[name] = folder_bytes(data_dir / name)
    carried = sum(sizes.values())
    room = MACHINE_LIMIT_MIB - (tree + carried) / 2**20
    listed = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items()) or "none"
    logger.info(
        "data step: tree %.1f MiB + carried data %.1f MiB (%s) of the %.0f MiB a lent machine takes: "
        "%.1f MiB left",
        tree / 2**20,
        carried / 2**20,
        listed,
        MACHINE_LIMIT_MIB,
        room,
    )
    record = {
        "tree_mib": tree / 2**20,
        "data_mib": {k: v / 2**20 for k, v in sizes.items()},
        "room_mib": room,
    }
    return skip, {**record, "skipped_grids": skip}


def measured_seconds(run_dir: Path) -> float:
    """The run's summed round times (``timings.jsonl``)."""
    return math.fsum(seconds for _, seconds in logged_round_times(run_dir))


def write_archives(chosen: Sequence[Pending], campaign: Campaign, out: Path) -> list[Path]:
    """One ``<study>.tar.gz`` per study of the finished ``chosen`` runs (``<study>/runs/<path>``), each
    written beside its name and then renamed onto it, so that a reader (an import while the campaign runs)
    finds the previous archive or the new one, never half of one."""
    finished = [
        c for c in chosen if finished_summary(c.point.run_dir, c.point.config.train.rounds) is not None
    ]
    archives = []
    with tempfile.TemporaryDirectory(prefix="fedaug_campaign_") as stage_name:
        stage = Path(stage_name)
        for item in finished:
            target = stage / item.grid.study / "runs" / archive_path(item.point)
            archive_runs(item.point.run_dir, target)  # rounded: fedaug.results.compact
        for study in dict.fromkeys(item.grid.study for item in finished):
            path = out / f"{study.replace('/', '__')}.tar.gz"
            partial = path.with_name(f".{path.name}.partial")  # not *.tar.gz: an import skips it
            with tarfile.open(partial, "w:gz") as tar:
                tar.add(stage / study, arcname=study)
            os.replace(partial, path)
            archives.append(path)
    return archives


def run_campaign(
    campaign: Campaign,
    *,
    budget: float,
    device: str,
    out: Path,
    runs_dir: Path,
    data_dir: Path,
    workers: int | None = None,
    overrides: Sequence[str] = (),
    max_archives: int = MAX_STUDIES,
    advance: bool = False,
    choose_once: bool = False,
) -> dict[str, Any]:
    """Runs the campaign's next runs within ``budget`` seconds (module docstring); returns the summary.
    When the chosen runs end before the budget (sooner than estimated), it chooses again from what is left
    (``choose_once``: it runs only what it chose at the start, the list ``--dry-run`` prints).
    ``advance``: also the next run that cannot finish in it, until the budget ends (:func:`select`).
    ``max_archives``: at most this many studies (one archive each) are run, so that files written beside
    ``out``'s (a speed probe's) still fit in what a lent machine returns.

    Raises:
        ConfigError: a budget that is not a positive number of seconds, a bad campaign file.
        FedaugError: a device this machine lacks, an ``out`` that is a file.
    """
    start = time.monotonic()
    if not budget > 0 or not math.isfinite(budget):
        raise ConfigError(f"--budget must be a positive number of seconds, got {budget}")
    check_folder_target(out, "campaign folder --out")
    kind = resolve_device(device).type
    at_once = workers or campaign.workers.get(kind, 0) or usable_cores()
    extra = [f"engine.device={device}", f"data.data_dir={data_dir}", *overrides]
    probe = (
        given_or_measured() if kind == "cpu" else None
    )  # a GPU's runs do not wait on the host's arithmetic
    states = grid_states(campaign, Ledger(campaign.studies, probe), runs_dir, kind, extra)
    out.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out / LOG_NAME, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    loggers = [logging.getLogger(name) for name in ("fedaug", "tools")]  # the runs' lines and the campaign's
    levels = [log.level for log in loggers]
    for log in loggers:
        log.addHandler(handler)
        log.setLevel(min(log.getEffectiveLevel(), logging.INFO))  # the log has the INFO lines in any case
    saved_probe = os.environ.get(PROBE_ENV)
    if probe is not None:
        os.environ[PROBE_ENV] = f"{probe:.6g}"  # each run's env.json records it (and so do its workers')
        logger.info("host probe: %.4f s a reference step (fedaug.sweeps.probe)", probe)
    try:
        summary = _run(
            campaign,
            *(states, budget, start, kind, at_once, out, runs_dir, data_dir, device, max_archives),
            advance=advance,
            choose_once=choose_once,
        )
        return {**summary, "host_probe_s": probe}
    finally:
        if saved_probe is None:
            os.environ.pop(PROBE_ENV, None)
        else:
            os.environ[PROBE_ENV] = saved_probe
        for log, level in zip(loggers, levels, strict=True):
            log.removeHandler(handler)
            log.setLevel(level)
        handler.close()


def _run(
    campaign: Campaign,
    states: list[GridState],
    budget: float,
    start: float,
    kind: str,
    at_once: int,
    out: Path,
    runs_dir: Path,
    data_dir: Path,
    device: str,
    max_archives: int,
    *,
    advance: bool,
    choose_once: bool,
) -> dict[str, Any]:
    skip, data = data_step(states, data_dir, tree_bytes(Path.cwd(), [runs_dir, data_dir, out]))
    chosen: list[Pending] = []
    started: set[Path] = set()
    stopped, errors = False, {}

    def choose(workers: int) -> list[Pending]:
        """The next runs for ``workers`` free workers in the time left, from those not chosen yet."""
        left = budget - (time.monotonic() - start)
        picked = {c.point.run_dir for c in chosen}
        rest = [replace(s, pending=[p for p in s.pending if p.point.run_dir not in picked]) for s in states]
        taken = {c.grid.study for c in chosen}
        batch = select(rest, left, workers, skip, max_archives, advance, taken) if left > 0 else []
        chosen.extend(batch)
        return batch

    def refill() -> list[Pending]:  # a worker is free and the pass has handed out its runs
        batch = choose(1)
        if batch:
            logger.info("a worker is free and time is left: choosing again (%d runs)", len(batch))
        return batch

    def rewrite(point: SweepPoint) -> None:  # a run ended: the archives take it now
        try:
            write_archives(chosen, campaign, out)
        except OSError as exc:  # the final write after the runs tries again, and fails loudly
            logger.warning("could not rewrite the archives after %s ended: %s", point.run_dir, exc)

    # time the runs leave (they ended sooner than estimated): the refills and the next pass fill it
    while not stopped and not (choose_once and chosen):
        left = budget - (time.monotonic() - start)
        before = bool(chosen)
        batch = choose(at_once)
        if not batch:
            if not chosen:
                logger.info(
                    "campaign %s on %s: no run selected (%s of budget)",
                    campaign.path,
                    device,
                    format_duration(left),
                )
            break
        if before:
            logger.info("time left after the runs chosen so far: choosing again")
        more = None if choose_once else refill
        stopped, failed, ran = _pass(batch, campaign, budget, start, at_once, device, left, more, rewrite)
        errors.update(failed)
        started |= ran
    archives = write_archives(chosen, campaign, out)
    summary = _summary(chosen, started, errors, archives, data, stopped, budget, time.monotonic() - start)
    summary.update({"campaign": str(campaign.path), "device": device, "kind": kind, "workers": at_once})
    (out / SUMMARY_NAME).write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    counts = {
        s: sum(r["status"] == s for r in summary["runs"]) for s in ("finished", "unfinished", "not_started")
    }
    logger.info("campaign done after %.0f s: %s; archives: %s", summary["elapsed_s"], counts, len(archives))
    return summary


def _pass(
    chosen: Sequence[Pending],
    campaign: Campaign,
    budget: float,
    start: float,
    at_once: int,
    device: str,
    left: float,
    refill: Callable[[], list[Pending]] | None = None,
    on_end: Callable[[SweepPoint], None] | None = None,
) -> tuple[bool, dict[Path, str], set[Path]]:
    """Runs ``chosen`` (longest first, the advancing one last) until they end or the budget does; returns
    whether the budget stopped it, the failed runs' errors and the run dirs it started. ``refill``: asked for
    more runs when a worker is free and ``chosen`` are all handed out (:class:`BudgetSchedule`);
    ``on_end``: called with each run that ends (it rewrites the archives of the finished runs)."""
    costs: dict[Path, float] = {}
    points: list[SweepPoint] = []

    def ordered(batch: Sequence[Pending]) -> list[SweepPoint]:
        """``batch``'s points, longest first and the advancing one last (its cost counts as 0)."""
        costs.update({c.point.run_dir: 0.0 if c.advances else c.cost or 0.0 for c in batch})
        for item in batch:
            if item.advances:
                logger.info("advancing (stops at the budget, resumes next time): %s", item.point.run_dir)
        found = [c.point for c in sorted(batch, key=lambda c: -costs[c.point.run_dir])]  # stable: list order
        points.extend(found)  # the sweep's progress lines count the runs added
        return found

    more = None if refill is None else lambda: ordered(refill())
    first = ordered(chosen)
    logger.info(
        "campaign %s on %s, %d at once: %d runs selected, about %s of the %s budget left",
        campaign.path,
        device,
        at_once,
        len(chosen),
        format_duration(makespan(list(costs.values()), at_once)),
        format_duration(left),
    )

    schedule = BudgetSchedule(first, lambda p: costs[p.run_dir], start + budget, refill=more, on_end=on_end)
    stopped, errors = False, {}
    try:
        with hard_stop(start + budget - time.monotonic()):
            result = run_sweep(points, workers=at_once, heartbeat=60.0, schedule=schedule)
        errors = dict(result.failures) if result is not None else {}
    except BudgetExpired:
        stopped = True
        logger.warning("budget of %s spent: runs still going were stopped (they resume)", budget)
    return stopped, errors, schedule.started


def _summary(
    chosen: Sequence[Pending],
    started: set[Path],
    errors: dict[Path, str],
    archives: Sequence[Path],
    data: dict[str, Any],
    stopped: bool,
    budget: float,
    elapsed: float,
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    per_grid: dict[str, dict[str, float]] = {}
    for item in chosen:
        point = item.point
        done = finished_summary(point.run_dir, point.config.train.rounds) is not None
        # not started: passed over by the budget, or waiting for a FedAvg run that never ended
        status = "finished" if done else "unfinished" if point.run_dir in started else "not_started"
        logged = rounds_logged(point)
        # measured to the ms: a tiny run's rounds sum to less than 0.05 s, which one decimal made 0.0
        estimate, measured = round(item.cost or 0.0, 1), round(measured_seconds(point.run_dir), 3)
        row = {
            "grid": item.grid.name,
            "study": item.grid.study,
            "path": str(archive_path(point)),
            "status": status,
            "rounds": f"{logged}/{point.config.train.rounds}",
            "estimate_s": estimate,
            "measured_s": measured,
        }
        if point.run_dir in errors:  # failed: unfinished, with what went wrong
            row["error"] = errors[point.run_dir]
        rows.append(row)
        grid = per_grid.setdefault(item.grid.name, {"finished": 0, "estimate_s": 0.0, "measured_s": 0.0})
        grid["finished"] += status == "finished"
        grid["estimate_s"] += estimate
        grid["measured_s"] += measured
    return {
        "budget_s": budget,
        "elapsed_s": round(elapsed, 1),
        "stopped_at_budget": stopped,
        "data": data,
        "runs": rows,
        "per_grid": per_grid,
        "archives": [p.name for p in archives],
        "unfinished": [r["path"] for r in rows if r["status"] == "unfinished"],
    }
