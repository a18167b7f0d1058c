"""From an :class:`ExperimentConfig` to a finished run directory.

:func:`run_experiment` resolves the config (dataset, partition, model, method) and checks everything it can
(options against the model and data, ``clients_per_round`` against K, the run dir's path) before the run
directory is made or changed; then it takes the run dir's lock (:mod:`fedaug.engine.lock`: a second process
on it is refused), writes ``config.yaml`` and ``env.json`` atomically, and runs the engine. Re-running the
same config resumes an interrupted run and skips a finished one; a different config pointing at the same run
directory is refused instead of silently mixing results (unless the run never finished a round).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from fedaug import registry
from fedaug.api import Method, RunContext, TrainSettings
from fedaug.data.datasets import Dataset, load_dataset
from fedaug.data.partition import Partition, make_partition
from fedaug.device import (
    default_eval_batch_size,
    describe_device,
    device_facts,
    device_label,
    resolve_device,
    set_deterministic,
)
from fedaug.engine.batched import conv_model_note
from fedaug.engine.checkpoint import (
    RunStore,
    atomic_write_text,
    check_run_checkpoint,
    corrupt_file,
    read_checkpoint,
    read_jsonl,
    write_json,
)
from fedaug.engine.lock import LOCK_NAME, RunDirLock, check_unlocked
from fedaug.engine.memory_format import resolve_channels_last
from fedaug.engine.sampling import clients_per_round
from fedaug.engine.simulation import Simulation, SimulationSpec
from fedaug.errors import ConfigError, PathError, path_error
from fedaug.experiments.branching import (
    config_differences,
    fedavg_name,
    saved_result_config,
    start_from_fedavg,
)
from fedaug.experiments.config import ExperimentConfig, MethodSpec
from fedaug.experiments.load import build_dataclass, dump_yaml
from fedaug.machine import cpu_facts, write_env
from fedaug.models import build_model
from fedaug.models.base import SplitModel
from fedaug.paths import cache_dir
from fedaug.precision import bf16_warning, flush_denormals

logger = logging.getLogger(__name__)


def partition_tag(config: ExperimentConfig) -> str:
    """A short name of the partition, e.g. ``quantity2-K75`` or ``dirichlet0.3-K75`` (``-pseed0`` added when
    ``partition.seed`` fixes the partition's seed)."""
    part = config.partition
    params = "_".join(str(v) for v in part.options.values())
    size = f"K{part.num_clients}" if part.num_clients is not None else f"n{part.mean_local_size:g}"
    fixed = "" if part.seed is None else f"-pseed{part.seed}"
    return f"{part.name}{params}-{size}{fixed}"


def run_dir_for(config: ExperimentConfig) -> Path:
    """``out_dir/name/<dataset>-<partition>/<method>/seed<k>``.

    Raises:
        ConfigError: when the name, dataset, partition or method would put the run dir outside ``out_dir``
            (an absolute part or a ``..`` segment).
    """
    setting = f"{config.data.name}-{partition_tag(config)}"
    relative = Path(config.name) / setting / config.method.name / f"seed{config.seed}"
    if relative.is_absolute() or ".." in relative.parts or "\0" in str(relative):
        raise ConfigError(
            f"the run dir {str(relative)!r} (name/dataset-partition/method/seed) must stay inside out_dir "
            f"{config.out_dir!r}: no '..' segment or absolute part"
        )
    return Path(config.out_dir) / relative


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


def fedavg_run_dir(config: ExperimentConfig) -> Path:
    """The run dir of the FedAvg run that ``config`` branches from (``engine.branch_from_fedavg``)."""
    return run_dir_for(replace(config, name=fedavg_name(config.name), method=MethodSpec(name="fedavg")))


def build_method(config: ExperimentConfig) -> Method:
    """The registered method with its typed config built from ``method.*`` options."""
    cls = registry.get("method", config.method.name)
    method_config = build_dataclass(cls.config_cls, config.method.options, path="method")
    method: Method = cls(method_config)
    return method


def round_settings(config: ExperimentConfig, round_num: int) -> TrainSettings:
    """The local training settings of ``round_num``, with the engine's precision."""
    return replace(config.train.settings(round_num), precision=config.engine.precision)


@dataclass
class Prepared:
    """The resolved pieces of an experiment."""

    dataset: Dataset
    partition: Partition
    method: Method
    spec: SimulationSpec


def load_data_and_partition(config: ExperimentConfig) -> tuple[Dataset, Partition]:
    """Loads the dataset and makes (or loads the cached) partition of its train set."""
    data = config.data
    dataset = load_dataset(data.name, data_dir=data.data_dir, **data.options)
    part = config.partition
    partition = make_partition(
        dataset.y_train.numpy(),
        name=part.name,
        num_classes=dataset.num_classes,
        seed=config.seed if part.seed is None else part.seed,
        num_clients=part.num_clients,
        mean_local_size=part.mean_local_size,
        local_test_fraction=part.local_test_fraction,
        cache_dir=cache_dir() / "partitions",
        **part.options,
    )
    return dataset, partition


@dataclass
class _Resolved:
    """The checked pieces of a config, before a simulation is specified."""

    method: Method
    dataset: Dataset
    partition: Partition
    model_fn: Callable[[], SplitModel]
    model: SplitModel
    run: RunContext
    per_round: int


def _resolve(config: ExperimentConfig) -> _Resolved:
    """Builds and checks every component of ``config``: device, method, data, partition, model, the method's
    options against them (:meth:`Method.check`) and ``clients_per_round`` against K. Writes nothing."""
    device = resolve_device(config.engine.device)
    set_deterministic(config.engine.deterministic)
    method = build_method(config)
    dataset, partition = load_data_and_partition(config)

    def model_fn() -> SplitModel:
        return build_model(
            config.model.name,
            num_classes=dataset.num_classes,
            input_shape=dataset.input_shape,
            **config.model.options,
        )

    model = model_fn()  # fail now, with the config's words, rather than inside round 1
    num_clients = len(partition.train_indices)
    if config.train.clients_per_round is not None and config.train.clients_per_round > num_clients:
        raise ConfigError(
            f"train.clients_per_round must be in 1..{num_clients} (K, the partition's number of clients), "
            f"got {config.train.clients_per_round}"
        )
    per_round = config.train.clients_per_round or clients_per_round(num_clients, config.train.client_fraction)
    run = RunContext(
        num_clients=num_clients,
        num_classes=dataset.num_classes,
        input_shape=tuple(dataset.input_shape),
        seed=config.seed,
        num_rounds=config.train.rounds,
        client_sizes=tuple(len(i) for i in partition.train_indices),
        input_mean=dataset.mean,
        input_std=dataset.std,
        input_modality=dataset.modality,
        device=device,
    )
    method.check(model, run)  # options that do not fit the model or the data (FLea's split layer), now
    return _Resolved(method, dataset, partition, model_fn, model, run, min(per_round, num_clients))


def check_experiment(config: ExperimentConfig, *, fresh: bool = False) -> None:
    """Every check :func:`run_experiment` makes before it writes anything (the run dir's path, a run of
    another config in it unless ``fresh``, the config against the data, model and method), for a command that
    runs several configs: one bad method's options or one occupied run dir are refused before the first run
    starts (a finished run, which will be skipped, is not checked further). Draws nothing from torch's global
    RNG."""
    run_dir = run_dir_for(config)
    check_run_dir_path(run_dir)
    if not fresh:
        _check_existing(run_dir, config)
    if finished_summary(run_dir, config.train.rounds) is not None:
        return
    with torch.random.fork_rng(devices=[]):
        _resolve(config)


def prepare(config: ExperimentConfig, run_dir: Path) -> Prepared:
    """Resolves every component of ``config`` (raising a FedaugError for any bad value).

    The device is resolved first, so ``engine.device=cuda`` on a machine without one is refused before any
    data is loaded or any file written; ``engine.deterministic`` is applied to this process here.
    """
    resolved = _resolve(config)
    method, dataset, partition, model_fn, run = (
        resolved.method,
        resolved.dataset,
        resolved.partition,
        resolved.model_fn,
        resolved.run,
    )
    device = run.device
    if (warning := bf16_warning(config.engine.precision, device)) is not None:
        logger.warning(warning)
    if config.engine.batched_clients and device.type == "cpu" and (note := conv_model_note(model_fn())):
        logger.warning(note)
    spec = SimulationSpec(
        method=method,
        model_fn=model_fn,
        train_x=dataset.x_train,
        train_y=dataset.y_train,
        test_x=dataset.x_test,
        test_y=dataset.y_test,
        client_indices=[torch.as_tensor(i, dtype=torch.long) for i in partition.train_indices],
        run=run,
        train_settings=partial(round_settings, config),
        clients_per_round=resolved.per_round,
        run_dir=run_dir,
        eval_batch_size=config.engine.eval_batch_size or default_eval_batch_size(device),
        progress=config.engine.progress,
        precision=config.engine.precision,
        batched_clients=config.engine.batched_clients,
        channels_last=resolve_channels_last(config.engine.channels_last, config.model.name),
        keep_checkpoints=tuple(config.engine.keep_checkpoints),
        local_test_indices=None
        if partition.test_indices is None
        else [torch.as_tensor(i, dtype=torch.long) for i in partition.test_indices],
        local_eval_every=config.engine.local_eval_every,
    )
    return Prepared(dataset=dataset, partition=partition, method=method, spec=spec)


def _check_existing(run_dir: Path, config: ExperimentConfig) -> None:
    saved_path = run_dir / "config.yaml"
    if not saved_path.exists():
        return
    if not (run_dir / "ckpt" / "latest.pt").exists() and not read_jsonl(run_dir / "metrics.jsonl"):
        # it never finished a round (it failed in round 1): nothing to mix, the new config starts it over
        return
    # Engine settings do not change results, except precision and flush_denormals, which stay in the
    # comparison (threads and the CPU change the rounding: warned on resume, _warn_rounding_change);
    # compare lists sibling runs; name and out_dir only say where the run dir is (a run moved into a sweep's
    # tree is that sweep's run), nor does data.data_dir.
    try:
        diffs = config_differences(saved_path, config)
        saved = saved_result_config(saved_path)
    except ConfigError as exc:
        raise corrupt_file(saved_path, str(exc), "run config") from exc
    labels = list(diffs)
    used = _saved_env(run_dir).get("method_config")  # every option the run used, defaults included
    if used is not None and "method.name" not in diffs:
        options = _option_changes(used, config)
        diffs = [key for key in diffs if not key.startswith("method.")]
        option_labels = [
            f"method.{key} (the run used {json.dumps(used[key])}, now {value})"
            for key, value in options.items()
        ]
        labels = diffs + option_labels
        saved = {**saved, **{f"method.{k}": used[k] for k in options}}
        diffs += [f"method.{k}" for k in options]
    if diffs:
        used_values = {key: saved[key] for key in diffs if key in saved}
        raise ConfigError(_different_config_message(run_dir, labels, used_values, saved.get("train.rounds")))


def _different_config_message(run_dir: Path, labels: list[str], used: dict[str, Any], rounds: Any) -> str:
    """Why a run dir is refused, and the remedies in the order that loses nothing: a new run dir for the new
    config, the values the run used to go on with it, and only last ``--fresh``, which deletes its rounds
    (``used``: the differing keys' values in the run; ``rounds``: its ``train.rounds``)."""
    done = len(read_jsonl(run_dir / "metrics.jsonl"))
    finished = (run_dir / "summary.json").exists()
    state = f"finished ({done} rounds)" if finished else f"{done} of {rounds} rounds done"
    lost = f"its {done} finished round{'' if done == 1 else 's'}" if done else "it"
    sets = " ".join(f"--set {key}={_set_value(value)}" for key, value in used.items())
    resume = f"; to go on with that run, give the values it used: {sets}" if sets else ""
    return (
        f"{run_dir} holds a run with a different config (differs in: {', '.join(labels)}), {state}. To keep "
        f"it, run this config in a new run dir: --set name=<new name> or --out-dir <folder>{resume}; only if "
        f"that run is not needed: --fresh deletes {lost} and starts over"
    )


def _set_value(value: Any) -> str:
    """``value`` as ``--set key=...`` reads it back (YAML flow style: ``0.001``, ``adam``, ``[1, 2]``)."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _check_checkpoint(run_dir: Path) -> None:
    """Refuses a corrupt ``ckpt/latest.pt`` before the run dir is touched (memory-mapped where it is a zip,
    as ``torch.save`` writes: the tensors are not read; the engine loads the checkpoint when it resumes)."""
    path = RunStore(run_dir).ckpt_path
    if path.exists():
        check_run_checkpoint(read_checkpoint(path, mmap=zipfile.is_zipfile(path)), path)


def _saved_env(run_dir: Path) -> dict[str, Any]:
    """The ``env.json`` of the run in ``run_dir`` as it last started (empty if there is none)."""
    env_path = run_dir / "env.json"
    if not env_path.exists():
        return {}
    try:
        env = json.loads(env_path.read_bytes())
    except OSError as exc:
        raise path_error(exc, env_path, "read") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise corrupt_file(env_path, f"not JSON: {exc}", "run record (env.json)") from exc
    if not isinstance(env, dict):
        raise corrupt_file(env_path, f"a {type(env).__name__}, not a mapping", "run record (env.json)")
    return env


def _option_changes(used: dict[str, Any], config: ExperimentConfig) -> dict[str, str]:
    """The method options whose values ``config`` would run with differ from those the run ``used``: each one
    (sorted) with its value now, as JSON.

    Compares the options in effect, defaults included, not the options as given in ``config.yaml``: a method
    default that changes after a run started would otherwise resume it with the new value, and naming the
    value it used (``--set method.<option>=<value>``) finishes it as it started. Options the run did not
    record are left out (a new option's default keeps the behaviour it had without it).
    """
    now = json.loads(json.dumps(asdict(build_method(config).config)))  # tuples as lists, as in env.json
    changed = sorted(key for key in used.keys() & now.keys() if used[key] != now[key])
    return {key: json.dumps(now[key]) for key in changed}


def _warn_rounding_change(run_dir: Path, device: torch.device) -> None:
    """Warns when a run resumes with another torch thread count, on another kind of CPU, or on another device
    (CPU vs a GPU model) than it last ran with (``env.json``; runs from before the CPU was recorded are not
    checked for it; runs from before devices were recorded ran on the CPU).

    Multi-threaded ops split their sums differently (a HARNet round's train loss differs in the 6th digit
    between 1 and 2 threads), and the kernels picked for another CPU round differently
    (:mod:`fedaug.machine`), so the rest of the run will not be bit-identical to an uninterrupted run. Not
    refused: the run is as valid, only not the same to the last digit.
    """
    if not (run_dir / "metrics.jsonl").exists():
        return
    env = _saved_env(run_dir)
    before = env.get("num_threads")
    now = torch.get_num_threads()
    if before is not None and before != now:
        logger.warning(
            "%s ran with %s torch threads and resumes with %d: float sums round differently with another "
            "thread count, so its remaining rounds will not be bit-identical to an uninterrupted run's "
            "(set engine.num_threads=%s to keep them identical)",
            run_dir,
            before,
            now,
            before,
        )
    was, now_on = device_label(env), device_label(device_facts(device))
    if env and was != now_on:
        logger.warning(
            "%s ran on %s and resumes on %s: kernels round differently on another device, so its remaining "
            "rounds will not be bit-identical to an uninterrupted run's",
            run_dir,
            was,
            now_on,
        )
    cpu = cpu_facts()
    keys = ("cpu_model", "cpu_capability")
    on_cpu = was == now_on == "cpu"  # a GPU run's arithmetic does not depend on its host's CPU
    if on_cpu and all(key in env for key in keys) and any(env[key] != cpu[key] for key in keys):
        logger.warning(
            "%s ran on %s (%s) and resumes on %s (%s): kernels round differently on another kind of CPU, so "
            "its remaining rounds will not be bit-identical to an uninterrupted run's",
            run_dir,
            env["cpu_model"],
            env["cpu_capability"],
            cpu["cpu_model"],
            cpu["cpu_capability"],
        )


def run_experiment(
    config: ExperimentConfig,
    *,
    fresh: bool = False,
    engine: Callable[[SimulationSpec], Simulation] = Simulation,
    quiet: bool = False,
    after: str = "",
) -> dict[str, Any]:
    """Runs ``config`` to completion (resuming or skipping as needed) and returns its summary.

    ``engine`` builds the round loop from the resolved spec: the in-process :class:`Simulation` by default,
    or the Flower adapter's subclass, which sends the client calls to Flower nodes. ``quiet`` logs no round
    lines whatever ``engine.progress`` says (a sweep's worker processes, whose lines would interleave); it is
    not written to ``config.yaml``, so running the run again from its ``config.yaml`` shows its progress.
    ``after`` says what the command runs next, for the progress line (``then flea (100 rounds)``:
    :func:`fedaug.experiments.estimate.job_plan`).
    """
    run_dir = run_dir_for(config)
    check_run_dir_path(run_dir)
    check_unlocked(run_dir)  # another process runs it: refused before any data is loaded
    if not fresh:
        _check_existing(run_dir, config)
        _check_checkpoint(run_dir)
        finished = finished_summary(run_dir, config.train.rounds)
        if finished is not None:
            logger.info("%s is already finished; skipping (use --fresh to run it again)", run_dir)
            return finished
    if config.engine.num_threads is not None:
        torch.set_num_threads(config.engine.num_threads)
    prepared = prepare(config, run_dir)  # every check passed before the run dir is made or changed
    with RunDirLock(run_dir):  # released on any exit, by the kernel if the process is killed
        if after:
            prepared = replace(prepared, spec=replace(prepared.spec, after=after))
        return _run_locked(config, run_dir, prepared, fresh=fresh, engine=engine, quiet=quiet)


def _run_locked(
    config: ExperimentConfig,
    run_dir: Path,
    prepared: Prepared,
    *,
    fresh: bool,
    engine: Callable[[SimulationSpec], Simulation],
    quiet: bool,
) -> dict[str, Any]:
    """:func:`run_experiment` once it holds the run dir's lock."""
    if fresh:
        clear_run_dir(run_dir)
    else:  # again: another process may have written the run dir before this one got the lock
        _check_existing(run_dir, config)
        finished = finished_summary(run_dir, config.train.rounds)
        if finished is not None:
            logger.info("%s is already finished; skipping (use --fresh to run it again)", run_dir)
            return finished
    device = prepared.spec.run.device
    atomic_write_text(run_dir / "config.yaml", dump_yaml(config))
    _warn_rounding_change(run_dir, device)
    # config.yaml keeps the method options as given; env.json records every option the run used, defaults
    # included, so a later default change cannot change its meaning (_check_existing compares them on resume).
    method_options = asdict(prepared.method.config)
    extra = {"dataset_source": prepared.dataset.source, "method_config": method_options}
    write_env(run_dir, {**extra, **device_facts(device), "deterministic": config.engine.deterministic})
    logger.info(
        "run %s: %s on %s (%d clients, %d per round), %d rounds, on %s",
        run_dir,
        config.method.name,
        config.data.name,
        prepared.spec.run.num_clients,
        prepared.spec.clients_per_round,
        config.train.rounds,
        describe_device(device),
    )
    if config.engine.branch_from_fedavg:
        start_from_fedavg(config, run_dir, prepared.spec.method, prepared.spec.run, fedavg_run_dir(config))
    with flush_denormals(config.engine.flush_denormals):
        summary = engine(replace(prepared.spec, progress=False) if quiet else prepared.spec).run()
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


def finished_summary(run_dir: Path, rounds: int) -> dict[str, Any] | None:
    """The summary of the run in ``run_dir`` if it has finished ``rounds`` rounds (its ``summary.json`` says
    so), else None: the one test of "finished" for a run, a sweep's status and its time estimate. An
    unreadable ``summary.json`` counts as unfinished (the run then ends at once from its last checkpoint and
    rewrites it).
    """
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        return None
    try:
        summary = json.loads(summary_path.read_bytes())
    except (OSError, ValueError):
        logger.warning("%s cannot be read; the run counts as unfinished", summary_path)
        return None
    if not isinstance(summary, dict) or summary.get("rounds") != rounds:
        return None
    return summary


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
    """Methods side by side: best accuracy (round), mean of the last 10 rounds, final accuracy."""
    lines = [f"{'method':<16}{'best %':>9}{'round':>7}{'last-10 %':>11}{'final %':>9}"]
    for name, summary in rows:
        if "best_acc" not in summary:
            lines.append(f"{name:<16}{'(no evaluation)':>36}")
            continue
        lines.append(
            f"{name:<16}{100 * summary['best_acc']:>9.2f}{summary['best_round']:>7d}"
            f"{100 * summary['last10_acc']:>11.2f}{100 * summary['final_acc']:>9.2f}"
        )
    return "\n".join(lines)
