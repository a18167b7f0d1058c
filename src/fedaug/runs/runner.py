"""From an :class:`ExperimentConfig` to a finished run directory.

:func:`run_experiment` checks what it can before any data is loaded (the run dir's path, another process on
it, a run of another config in it: :mod:`fedaug.runs.resume`), skips a finished run, sets the
run's threads, then resolves the config once into a :class:`~fedaug.runs.resolve.ResolvedRun`
(method, data, partition, model, settings; every option checked against them) before the run directory is
made or changed. Then it takes the run dir's lock (:mod:`fedaug.runs.lock`: a second process on it is
refused), writes ``config.yaml`` and ``env.json`` atomically, starts from the FedAvg run where the run
branches (:mod:`fedaug.runs.branch`) and runs the engine. Re-running the same config resumes an
interrupted run and skips a finished one; a different config pointing at the same run directory is refused
instead of silently mixing results (unless the run never finished a round).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from functools import cache, partial
from pathlib import Path
from typing import Any

import torch

from fedaug.api import Method, TrainSettings
from fedaug.config.identity import run_dir_for
from fedaug.config.schema import ExperimentConfig, MethodSpec
from fedaug.engine.checkpoint import write_json
from fedaug.engine.progress import JobEta
from fedaug.engine.simulation import Simulation, SimulationSpec, round_train_settings
from fedaug.errors import ClientError, FedaugError, PathError, path_error
from fedaug.runs.branch import start_from_fedavg
from fedaug.runs.lock import LOCK_NAME, RunDirLock, check_unlocked
from fedaug.runs.resolve import (
    ResolvedRun,
    build_method,
    cuda_graphs_on,
    resolve_components,
    resolve_run,
)
from fedaug.runs.resume import check_existing, finished_summary, record_run
from fedaug.runs.tracking import check_trackers, open_trackers
from fedaug.runs.verify import (
    identity_of,
    input_digests,
    record_identity,
    verify_run_dir,
    warn_changed_inputs,
)
from fedaug.runtime import startup
from fedaug.runtime.device import describe_device
from fedaug.runtime.lazy_dynamo import defer_dynamo_import
from fedaug.runtime.machine import use_threads
from fedaug.runtime.precision import flush_denormals

logger = logging.getLogger(__name__)


def check_run_dir_path(run_dir: Path) -> None:
    """Raises PathError unless ``run_dir`` is a folder or can be made one: its first existing ancestor must be
    a writable folder (not a file, e.g. an ``--out-dir`` naming a file). Checked before any data is loaded."""
    for path in (run_dir, *run_dir.parents):
        if not path.exists():
            continue
        if not path.is_dir():
            raise PathError(f"cannot create the run dir {run_dir}: {path} is a file, not a folder")
        if path != run_dir and not os.access(path, os.W_OK | os.X_OK):
            raise PathError(f"cannot create the run dir {run_dir}: {path} is not writable (permission)")
        return


def round_settings(config: ExperimentConfig, round_num: int, device: torch.device) -> TrainSettings:
    """The local training settings the engine gives the method in ``round_num`` of ``config``'s run on
    ``device``."""
    engine = config.engine
    return round_train_settings(
        config.train.settings, engine.precision, round_num, cuda_graphs=cuda_graphs_on(engine, device)
    )


def prepare(config: ExperimentConfig, run_dir: Path) -> ResolvedRun:
    """``config`` resolved into a run in ``run_dir`` (:func:`~fedaug.runs.resolve.resolve_run`)."""
    return resolve_run(config, run_dir)


def _method_once(config: ExperimentConfig) -> Callable[[], Method]:
    """Builds ``config``'s method on the first call and returns that instance on every call: the resume
    check (when it compares option values) and the resolve step share one method."""
    return cache(partial(build_method, config))


def check_experiment(config: ExperimentConfig, *, fresh: bool = False) -> None:
    """Every check :func:`run_experiment` makes before it writes anything (the run dir's path, a run of
    another config in it unless ``fresh``, the config against the data, model and method), for a command that
    runs several configs: one bad method's options or one occupied run dir are refused before the first run
    starts (a finished run, which will be skipped, is not checked further). Draws nothing from torch's global
    RNG."""
    run_dir = run_dir_for(config)
    check_run_dir_path(run_dir)
    method_fn = _method_once(config)
    if not fresh:
        check_existing(run_dir, config, method_fn)
        finished = finished_summary(run_dir, config.train.rounds)
        verify_run_dir(run_dir, config.train.rounds, finished)
        if finished is not None:
            return
    with torch.random.fork_rng(devices=[]):
        resolve_components(config, method_fn)


def run_experiment(
    config: ExperimentConfig,
    *,
    fresh: bool = False,
    engine: Callable[[SimulationSpec], Simulation] = Simulation,
    quiet: bool = False,
    job: JobEta | None = None,
) -> dict[str, Any]:
    """Runs ``config`` to completion (resuming or skipping as needed) and returns its summary.

    ``engine`` builds the round loop from the resolved spec: the in-process :class:`Simulation` by default,
    or the Flower adapter's subclass, which sends the client calls to Flower nodes. ``quiet`` logs no round
    lines whatever ``engine.progress`` says (a sweep's worker processes, whose lines would interleave); it is
    not written to ``config.yaml``, so running the run again from its ``config.yaml`` shows its progress.
    ``job`` is what the command runs after it, for the progress line's whole-job time left (``job eta 38m``:
    :func:`fedaug.sweeps.estimate.job_plan`).
    """
    startup.mark("command")  # what the caller did first (a sweep's planning, a script's own work)
    run_dir = run_dir_for(config)
    check_run_dir_path(run_dir)
    check_unlocked(run_dir)  # another process runs it: refused before any data is loaded
    check_trackers(config)  # tracking asks for a package that is not installed: refused before training
    method_fn = _method_once(config)
    if not fresh:
        check_existing(run_dir, config, method_fn)
        finished = finished_summary(run_dir, config.train.rounds)
        inputs = verify_run_dir(run_dir, config.train.rounds, finished)  # identity, checkpoint, logs, summary
        if finished is not None:
            return _skip_finished(run_dir, config, finished, inputs)
    startup.mark("run_dir")
    use_threads(config.engine.num_threads)
    defer_dynamo_import()  # torch.optim's first optimizer would import torch._dynamo (seconds) for nothing
    resolved = resolve_run(config, run_dir, method_fn=method_fn)  # before the run dir is made or changed
    spec = replace(resolved.spec, job=job, progress=resolved.spec.progress and not quiet)
    made = _missing_dirs(run_dir)
    with RunDirLock(run_dir):  # released on any exit, by the kernel if the process is killed
        try:
            return _run_locked(replace(resolved, spec=spec), fresh=fresh, engine=engine, method_fn=method_fn)
        except ClientError as exc:
            if not (made and _diverged_before_a_checkpoint(exc, run_dir)):
                raise
            clear_run_dir(run_dir)
            failure = exc
    _remove_made(run_dir, made)
    train = config.train
    raise FedaugError(
        f"{failure} (train.lr={train.lr:g}, train.optimizer={train.optimizer}); it stopped before its first "
        f"checkpoint, so the run dir it made was removed"
    ) from failure.__cause__


def _skip_finished(
    run_dir: Path, config: ExperimentConfig, summary: dict[str, Any], inputs: dict[str, Any] | None
) -> dict[str, Any]:
    """Says that the finished run in ``run_dir`` is skipped (with a WARNING if a plugin or data file it was
    trained with has changed since: ``inputs``, its checkpoint's digests) and returns its ``summary``."""
    logger.info("%s is already finished; skipping (use --fresh to run it again)", run_dir)
    warn_changed_inputs(run_dir, inputs, config.plugins)
    return summary


def _missing_dirs(run_dir: Path) -> list[Path]:
    """``run_dir`` and those of its parents that do not exist yet, innermost first (empty: it exists)."""
    missing, path = [], run_dir
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _diverged_before_a_checkpoint(error: ClientError, run_dir: Path) -> bool:
    """Whether a run's client failed on a non-finite loss before the run wrote any checkpoint (a run dir
    this process made then holds nothing a resume could use: the same command fails again the same way)."""
    return isinstance(error.__cause__, FloatingPointError) and not (run_dir / "ckpt" / "latest.pt").exists()


def _remove_made(run_dir: Path, made: list[Path]) -> None:
    """Removes the lock file left in ``run_dir`` (emptied, its lock released) and the folders in ``made``
    that are empty (another run's folder beside it keeps its parents)."""
    with contextlib.suppress(OSError):
        (run_dir / LOCK_NAME).unlink()
    for path in made:
        try:
            path.rmdir()
        except OSError:
            return


def _run_locked(
    resolved: ResolvedRun,
    *,
    fresh: bool,
    engine: Callable[[SimulationSpec], Simulation],
    method_fn: Callable[[], Method],
) -> dict[str, Any]:
    """:func:`run_experiment` once it holds the run dir's lock."""
    config, run_dir = resolved.config, resolved.run_dir
    if fresh:
        clear_run_dir(run_dir)
    else:  # again: another process may have written the run dir before this one got the lock
        check_existing(run_dir, config, method_fn)
        finished = finished_summary(run_dir, config.train.rounds)
        inputs = verify_run_dir(run_dir, config.train.rounds, finished)
        if finished is not None:
            return _skip_finished(run_dir, config, finished, inputs)
    record_run(resolved)  # only now, every check passed: config.yaml, env.json, identity.json
    record_identity(run_dir, config)
    identity = identity_of(config)["result_config"]  # kept in every checkpoint too, with the inputs' digests
    inputs = input_digests(config.plugins, resolved.dataset.source_files)
    resolved = replace(resolved, spec=replace(resolved.spec, identity=identity, inputs=inputs))
    logger.info(
        "run %s: %s on %s (%d clients, %d per round), %d rounds, on %s%s",
        run_dir,
        config.method.name,
        config.data.name,
        resolved.run.num_clients,
        resolved.spec.clients_per_round,
        config.train.rounds,
        describe_device(resolved.settings.device),
        ", local steps as CUDA graphs" if resolved.spec.cuda_graphs else "",
    )
    start_from_fedavg(resolved)
    trackers = open_trackers(config, run_dir)  # tracking: [tensorboard]; none by default
    spec = replace(resolved.spec, observers=(*resolved.spec.observers, *trackers))
    startup.mark("record")
    try:
        with flush_denormals(resolved.settings.flush_denormals):
            summary = engine(spec).run()
    finally:  # a stopped run's events are on disk for its resume to continue
        for tracker in trackers:
            close = getattr(tracker, "close", None)
            if close is not None:
                close()
    write_json(run_dir / "summary.json", summary)
    return summary


def clear_run_dir(run_dir: Path) -> None:
    """Removes everything in ``run_dir`` but its lock file (``--fresh``, with the lock held)."""
    for path in run_dir.iterdir():
        if path.name == LOCK_NAME:
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError as exc:
            raise path_error(exc, path, "remove (--fresh)") from exc


def comparison_configs(config: ExperimentConfig) -> list[ExperimentConfig]:
    """One config per method of ``config.compare`` (or just ``config`` when it compares nothing)."""
    if not config.compare:
        return [config]
    configs = []
    for name in config.compare:
        method = config.method if name == config.method.name else MethodSpec(name=name)
        configs.append(replace(config, method=method, compare=[]))
    return configs


def comparison_table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """Methods side by side: best accuracy (round), mean of the last 10 rounds, final accuracy.

    Runs of fewer than 10 rounds average the rounds they have: the column says how many (``last-3 %``);
    runs of one round have no such mean (best and final only)."""
    counts = {min(10, int(s.get("rounds", 10))) for _, s in rows if "best_acc" in s}
    n = counts.pop() if len(counts) == 1 else 10  # runs of different lengths: each its last 10 at most
    mean = f"last-{n} %" if n > 1 else ""  # one round: its best and final say it all
    width = 11 if mean else 0
    lines = [f"{'method':<16}{'best %':>9}{'round':>7}{mean:>{width}}{'final %':>9}"]
    for name, summary in rows:
        if "best_acc" not in summary:
            lines.append(f"{name:<16}{'(no evaluation)':>{25 + width}}")
            continue
        tail = f"{100 * summary['last10_acc']:>{width}.2f}" if mean else ""
        lines.append(
            f"{name:<16}{100 * summary['best_acc']:>9.2f}{summary['best_round']:>7d}{tail}"
            f"{100 * summary['final_acc']:>9.2f}"
        )
    return "\n".join(lines)
