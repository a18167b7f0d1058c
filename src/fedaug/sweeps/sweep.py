"""Sweeps: a grid of configs expanded into run directories, run serially or by worker processes.

A sweep file is an ordinary config (``extends:`` and any config keys: the *base*) plus a ``grid:``. The grid
maps config keys to lists of values and is expanded as a cartesian product; ``grid:`` may also be a list of
such mappings, whose products are concatenated (one-at-a-time hyper-parameter sweeps)::

    extends: ../default.yaml
    name: my_sweep
    grid:
      partition: [{name: quantity, classes_per_client: 2}, {name: dirichlet, alpha: 0.3}]
      method: [fedavg, flea]
      seed: [0, 1, 2]

Each value is applied to the base in the grid's key order, exactly like ``--set key=value`` (renaming a
method or partitioner drops the previous one's options). Grid keys that do not show in the run directory
(``method.decor_weight``, ``train.lr``, ...) are added to the experiment name, so every point gets its own run
dir: ``runs/my_sweep/method.decor_weight=0/<dataset>-<partition>/<method>/seed<k>/``. Sweep runs use
``engine.num_threads=1`` unless the sweep sets it, so their results do not depend on ``--workers``.
Finished runs are skipped and interrupted ones resume (:func:`~fedaug.runs.runner.run_experiment`).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedaug.config.identity import format_suffix, result_config, run_dir_for
from fedaug.config.load import (
    SMOKE_OVERRIDES,
    SMOKE_TAG,
    config_from_dict,
    config_to_dict,
    merge_layer,
    read_yaml,
)
from fedaug.config.schema import ExperimentConfig, check_compared_method
from fedaug.config.tree import OPEN_SECTIONS, apply_override
from fedaug.config.yamlio import parse_yaml
from fedaug.engine.progress import JobEta
from fedaug.errors import ConfigError, RunLockedError, out_of_memory_sentence
from fedaug.runs.resolve import method_option_names
from fedaug.runs.runner import run_experiment
from fedaug.runtime.device import release_cached_memory
from fedaug.sweeps.archived import ArchiveTimes
from fedaug.sweeps.cluster import least_loaded, on_device
from fedaug.sweeps.estimate import remaining_seconds, run_status, running_line, sweep_job
from fedaug.sweeps.options import HEARTBEAT_SECONDS as HEARTBEAT_SECONDS
from fedaug.sweeps.options import MAX_WORKERS as MAX_WORKERS
from fedaug.sweeps.options import check_sweep_options as check_sweep_options
from fedaug.sweeps.order import Schedule, SweepPoint
from fedaug.sweeps.workers import exit_with_parent, sigterm_as_interrupt, terminate_workers

logger = logging.getLogger(__name__)

_IN_RUN_DIR = frozenset(
    ("out_dir", "name", "seed", "data.name", "method.name", "partition.name", "partition.num_clients")
)
"""Grid keys whose value already shows in the run directory's path."""


@dataclass(frozen=True)
class Outcome:
    """What happened to one run: ``finished`` (ran now), ``skipped`` (was finished), ``busy`` (another process
    holds its run dir's lock: left alone) or ``failed``."""

    status: str
    summary: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0


@dataclass
class SweepResult:
    """Run dirs per outcome, in the order they completed."""

    finished: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    failures: list[tuple[Path, str]] = field(default_factory=list)
    busy: list[tuple[Path, str]] = field(default_factory=list)


def read_sweep(
    path: str | Path,
    overrides: Sequence[str] = (),
    grid_overrides: Sequence[str] = (),
    *,
    smoke: bool = False,
) -> tuple[dict[str, Any], list[dict[str, list[Any]]]]:
    """Reads a sweep file into its base config tree and its grid blocks.

    Args:
        path: the sweep YAML (``extends:`` is followed, relative to the file).
        overrides: ``key=value`` overrides of the base (applied before the grid, so the grid wins).
        grid_overrides: ``key=[v1, v2]`` replacements of a grid axis in every block that has it (added to
            every block when none has it).
        smoke: ``--smoke``: :data:`~fedaug.config.load.SMOKE_OVERRIDES` before ``overrides``, and
            ``-smoke`` appended to the base's name, so that its run dirs are never the sweep's own.

    Returns:
        The base as a nested dict and the grid blocks (each a mapping of key to a non-empty list).

    Raises:
        ConfigError: if the grid is malformed.
    """
    layer = read_yaml(path)
    grid = layer.pop("grid", None)
    tree = merge_layer(config_to_dict(ExperimentConfig()), layer)
    for override in [*(SMOKE_OVERRIDES if smoke else ()), *overrides]:
        tree = merge_layer(tree, apply_override({}, override))
    if smoke:
        tree["name"] = f"{tree['name']}{SMOKE_TAG}"
    blocks = _grid_blocks(grid, path)
    for override in grid_overrides:
        blocks = _replace_axis(blocks, override)
    if tree.get("compare") and not any("method" in b or "method.name" in b for b in blocks):
        check_compared_method(tree["method"]["name"], list(tree["compare"]))
        blocks = [{**b, "method": list(tree["compare"])} for b in blocks]  # seeds first, methods last
    tree["compare"] = []
    return tree, blocks


def _grid_blocks(grid: Any, path: str | Path) -> list[dict[str, list[Any]]]:
    if grid is None:
        return [{}]
    if not grid and isinstance(grid, list | Mapping):
        raise ConfigError(f"grid in {path} is empty: give it key: [values] (or leave grid: out for one run)")
    blocks = grid if isinstance(grid, list) else [grid]
    for block in blocks:
        if not isinstance(block, Mapping):
            raise ConfigError(f"grid in {path} must be a mapping of key: [values] (or a list of them)")
        for key, values in block.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"grid.{key} in {path} must be a non-empty list, got {values!r}")
    return [dict(b) for b in blocks]


def _replace_axis(blocks: list[dict[str, list[Any]]], override: str) -> list[dict[str, list[Any]]]:
    key, _, raw = override.partition("=")
    values = parse_yaml(raw, f"--grid {override!r}") if raw.strip() else None
    if not key.strip() or not isinstance(values, list) or not values:
        raise ConfigError(f"--grid {override!r} must look like key=[value1, value2]")
    key = key.strip()
    if any(key in b for b in blocks):
        return [{**b, key: values} if key in b else b for b in blocks]
    return [{**b, key: values} for b in blocks]


def expand_grid(blocks: Sequence[Mapping[str, list[Any]]]) -> list[dict[str, Any]]:
    """The cartesian product of every block, blocks concatenated: one ``{key: value}`` per point."""
    points = []
    for block in blocks:
        keys = list(block)
        points += [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*block.values())]
    return points


def point_patch(key: str, value: Any) -> dict[str, Any]:
    """The config layer of one grid value, as ``--set key=value`` builds it (``method: flea`` is a name)."""
    parts = [p for p in key.split(".") if p]
    if not parts:
        raise ConfigError(f"grid key {key!r} is empty")
    if len(parts) == 1 and parts[0] in OPEN_SECTIONS and not isinstance(value, Mapping):
        parts.append("name")
    patch: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        patch = {part: patch}
    return patch


def _flat_values(values: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            flat.update(_flat_values({f"{key}.{k}": v for k, v in value.items()}))
        elif key in OPEN_SECTIONS:
            flat[f"{key}.name"] = value
        else:
            flat[key] = value
    return flat


def _shown_in_run_dir(key: str) -> bool:
    return key in _IN_RUN_DIR or (key.startswith("partition.") and key != "partition.local_test_fraction")


def _slug(value: Any) -> str:
    if isinstance(value, float):
        text = repr(value)  # not :g, whose 6 digits could give two values one run dir
    elif isinstance(value, Mapping):
        text = "_".join(f"{k}{_slug(v)}" for k, v in value.items())
    elif isinstance(value, list | tuple):
        text = "-".join(_slug(v) for v in value)
    else:
        text = str(value)
    return text.replace("/", "_").replace(" ", "")


def name_suffix(values: Mapping[str, Any]) -> str:
    """``key=value,...`` of the grid values that the run directory does not show ('' if none)."""
    flat = _flat_values(values)
    return format_suffix((k, _slug(v)) for k, v in flat.items() if not _shown_in_run_dir(k))


def build_point(tree: Mapping[str, Any], values: Mapping[str, Any]) -> SweepPoint:
    """Applies one point's grid values to the base ``tree`` and resolves its config and run dir."""
    for key, value in values.items():
        tree = merge_layer(tree, point_patch(key, value))
    tree = dict(tree)
    suffix = name_suffix(values)
    if suffix:
        tree["name"] = f"{tree['name']}/{suffix}"
    if tree.get("engine", {}).get("num_threads") is None:
        tree["engine"] = {**tree.get("engine", {}), "num_threads": 1}
    config = config_from_dict(tree)
    return SweepPoint(config=config, run_dir=run_dir_for(config), values=dict(values))


def expand_sweep(
    path: str | Path,
    overrides: Sequence[str] = (),
    grid_overrides: Sequence[str] = (),
    *,
    smoke: bool = False,
    where: str | None = None,
) -> list[SweepPoint]:
    """All points of the sweep file ``path``, duplicates (same run dir, same config) removed (arguments: see
    :func:`read_sweep`; ``where``: how errors name the sweep, default its path).

    Raises:
        ConfigError: for a bad grid or value, two different configs that would share a run dir, or a
            ``method.<option>`` override that a method axis replaces (:func:`check_method_options`).
    """
    tree, blocks = read_sweep(path, overrides, grid_overrides, smoke=smoke)
    points: dict[Path, SweepPoint] = {}
    for values in expand_grid(blocks):
        point = build_point(tree, values)
        seen = points.get(point.run_dir)
        if seen is None:
            points[point.run_dir] = point
        elif result_config(config_to_dict(seen.config)) != result_config(config_to_dict(point.config)):
            raise ConfigError(
                f"grid points {seen.values} and {point.values} differ but share the run dir {point.run_dir}"
            )
    check_method_options(where or f"sweep {path}", overrides, list(points.values()))
    return list(points.values())


def check_method_options(where: str, overrides: Sequence[str], points: Sequence[SweepPoint]) -> None:
    """Refuses a ``method.<option>`` override that a point whose method has that option does not carry (or
    that no point carries): a sweep applies ``--set`` before its axes, and a method axis that renames the
    method drops its options, so those runs would silently use another value. A method without the option
    (FedAvg for FLea's ``decor_weight``) is not expected to carry it.

    Raises:
        ConfigError: naming the option, the methods it does not reach and where to give it instead.
    """
    for override in overrides:
        key, sep, _ = override.partition("=")
        option = key.strip().removeprefix("method.")
        if not sep or option == key.strip() or option in ("name", "options") or "." in option:
            continue
        value = apply_override({}, override)["method"][option]
        carried = [p.config.method.options.get(option) == value for p in points]
        lost = sorted(
            {
                p.config.method.name
                for p, has in zip(points, carried, strict=True)
                if not has and _has_option(p.config.method.name, option)
            }
        )
        if lost or (points and not any(carried)):
            missed = lost or sorted({p.config.method.name for p in points})
            raise ConfigError(
                f"{where}: set {override} does not reach {', '.join(missed)} (a method axis replaces the "
                f"method and its options); give it in the method entry, e.g. "
                f"{{name: {missed[0]}, {option}: {value}}}"
            )


def _has_option(method: str, option: str) -> bool:
    """Whether ``method``'s config has ``option`` (True for a method not registered here: assume it does)."""
    try:
        return option in method_option_names(method)
    except ConfigError:
        return True


def execute(config: ExperimentConfig, *, quiet: bool = False, job: JobEta | None = None) -> Outcome:
    """Runs one config to completion (the worker function; ``quiet``: no round lines; ``job``: what the sweep
    runs after it, for the round lines' ``job eta``); never raises an ``Exception``."""
    start = time.perf_counter()
    status = (
        "skipped" if run_status(SweepPoint(config, run_dir_for(config), {})) == "finished" else "finished"
    )
    try:
        summary = run_experiment(config, quiet=quiet, job=job)
    except RunLockedError as exc:  # another process runs it: reported, its files left alone
        return Outcome("busy", error=str(exc), seconds=time.perf_counter() - start)
    except Exception as exc:  # a failed run is reported; the sweep goes on with the others
        logger.debug("run %s failed", run_dir_for(config), exc_info=True)
        return Outcome("failed", error=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - start)
    finally:  # the worker outlives the run: what it kept cached on a GPU goes back to the runs beside it
        release_cached_memory()
    return Outcome(status, summary=summary, seconds=time.perf_counter() - start)


OUT_OF_MEMORY_RETRIES = 3
"""How often a multi-worker sweep puts back a run that ran out of device memory beside other runs."""


def out_of_memory(outcome: Outcome) -> bool:
    """Whether a failed run ran out of device memory (PyTorch's error, also inside a client's error)."""
    return outcome.status == "failed" and out_of_memory_sentence(outcome.error) is not None


def run_sweep(
    points: Sequence[SweepPoint],
    *,
    workers: int = 1,
    heartbeat: float = HEARTBEAT_SECONDS,
    order: str = "grid",
    schedule: Schedule | None = None,
    devices: Sequence[str] = (),
    archive: ArchiveTimes | None = None,
) -> SweepResult:
    """Runs every point (skipping finished ones), with ``workers`` processes; logs one line per run.

    With several workers, whose runs log no rounds, it also logs every ``heartbeat`` seconds without a
    finished run the round each running run has reached and its time left (0: never).

    A point that branches from a FedAvg point of the same sweep starts after that point has ended
    (:class:`~fedaug.sweeps.order.Schedule`); the others run in the given order, or with
    ``order="longest-first"`` the one with the most run time left first (by its siblings' round times).

    Args:
        points: from :func:`expand_sweep`.
        workers: number of worker processes (1: run in this process).
        heartbeat: seconds between the progress lines of a multi-worker sweep (0: none).
        order: ``grid`` or ``longest-first`` (:mod:`fedaug.sweeps.order`).
        schedule: hands out ``points`` instead of the ``order``'s (e.g. one that stops at a deadline,
            :class:`tools.campaign.run.BudgetSchedule`).
        devices: with several workers, each run starts on the one of these with the fewest runs
            (:func:`fedaug.sweeps.cluster.least_loaded`); empty: each run's own ``engine.device``.
        archive: with one worker, the archived runs' round times that cost the runs to come in each round
            line's ``job eta`` where their own seeds have none (:func:`fedaug.sweeps.estimate.sweep_job`);
            where neither does, the schedule's own estimate (:meth:`Schedule.estimate`) does.

    Returns:
        The finished, skipped and failed run dirs (failures with their error message).
    """
    check_sweep_options(workers, heartbeat, order)
    result = SweepResult()
    if schedule is None:
        schedule = Schedule(points, remaining_seconds if order == "longest-first" else None)
    done = 0
    if workers == 1:
        started: set[Path] = set()
        while (point := schedule.next()) is not None:
            done += 1
            started.add(point.run_dir)
            later = [p for p in points if p.run_dir not in started]
            job = sweep_job(point, later, archive, schedule.estimate)
            _record(result, point, execute(point.config, job=job), done, len(points))
            schedule.ended(point)
        return result
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=exit_with_parent,  # workers end with the sweep, also when it is killed
        initargs=(os.getpid(),),
    )
    running: dict[Future[Outcome], SweepPoint] = {}
    try:
        with sigterm_as_interrupt():
            total = points.__len__  # a schedule may add to ``points`` as it goes (the campaign's refill)
            _run_pool(pool, running, schedule, result, workers, heartbeat, total, devices=devices)
    except BaseException:
        stopped = terminate_workers(pool)  # their runs resume from their last round's checkpoint
        logger.warning("sweep stopped: %d worker(s) terminated, %d run(s) unfinished", stopped, len(running))
        raise
    pool.shutdown()
    return result


def _run_pool(
    pool: ProcessPoolExecutor,
    running: dict[Future[Outcome], SweepPoint],
    schedule: Schedule,
    result: SweepResult,
    workers: int,
    heartbeat: float,
    total: int | Callable[[], int],
    *,
    devices: Sequence[str] = (),
) -> None:
    """Hands the schedule's points to ``pool``'s workers until every point has ended (``total``: the
    sweep's size for the progress lines, or a function giving it, for a schedule that adds points).

    A run that runs out of device memory while other runs share the device is put back, up to
    :data:`OUT_OF_MEMORY_RETRIES` times, and from then on the sweep runs no more runs at once than were left
    running: the run resumes from its last checkpoint once one of them has ended, with the results it would
    have had (16 packed FLea runs once filled an H100 and 13 of them failed at the start).
    """
    done = 0
    at_once = workers
    again: list[SweepPoint] = []  # put back after running out of memory: they go before the schedule's
    tries: dict[Path, int] = {}
    while True:
        while len(running) < at_once and (point := (again.pop(0) if again else schedule.next())) is not None:
            if devices:  # --device cuda:0,cuda:1: on the least busy one (same run dir)
                point = on_device(
                    point, least_loaded(devices, (p.config.engine.device for p in running.values()))
                )
            # worker processes log no rounds: their lines would interleave
            running[pool.submit(execute, point.config, quiet=True)] = point
        if not running:
            return
        ended, _ = wait(running, timeout=heartbeat or None, return_when=FIRST_COMPLETED)
        if not ended:
            logger.info(running_line(list(running.values())))
        for future in ended:
            point = running.pop(future)
            outcome = _outcome_of(future)
            if out_of_memory(outcome) and running and tries.get(point.run_dir, 0) < OUT_OF_MEMORY_RETRIES:
                tries[point.run_dir] = tries.get(point.run_dir, 0) + 1
                at_once = max(1, min(at_once, len(running)))
                again.append(point)
                logger.warning(
                    "%s ran out of device memory beside %d other run(s): it resumes when one of them ends "
                    "(retry %d of %d); at most %d run(s) at once from now on",
                    point.run_dir,
                    len(running),
                    tries[point.run_dir],
                    OUT_OF_MEMORY_RETRIES,
                    at_once,
                )
                continue
            done += 1
            _record(result, point, outcome, done, total() if callable(total) else total)
            schedule.ended(point)


def _outcome_of(future: Future[Outcome]) -> Outcome:
    try:
        return future.result()
    except Exception as exc:  # the worker process itself died (killed, out of memory)
        return Outcome("failed", error=f"{type(exc).__name__}: {exc}")


def _record(result: SweepResult, point: SweepPoint, outcome: Outcome, done: int, total: int) -> None:
    where = f"[{done}/{total}] {point.run_dir}"
    if outcome.status == "busy":
        result.busy.append((point.run_dir, outcome.error))
        logger.warning("%s BUSY: %s", where, outcome.error)
        return
    if outcome.status == "failed":
        result.failures.append((point.run_dir, outcome.error))
        logger.error("%s FAILED after %.0f s: %s", where, outcome.seconds, outcome.error)
        return
    (result.skipped if outcome.status == "skipped" else result.finished).append(point.run_dir)
    summary = outcome.summary
    if "best_acc" not in summary:
        logger.info("%s %s (no evaluation)", where, outcome.status)
        return
    logger.info(
        "%s %s: best %.2f%% (round %d), last-10 %.2f%%, final %.2f%% (%.0f s)",
        where,
        outcome.status,
        100 * summary["best_acc"],
        summary["best_round"],
        100 * summary["last10_acc"],
        100 * summary["final_acc"],
        outcome.seconds,
    )
