"""A run dir's record (``config.yaml``, ``env.json``) and the checks that read it before a run (re)starts.

Re-running the same config resumes an interrupted run and skips a finished one (:func:`finished_summary`); a
different config pointing at the same run dir is refused instead of silently mixing results
(:func:`check_existing`, unless the run never finished a round), naming the keys that differ and the values
the run used. Method options compare as the run used them (``env.json``'s ``method_config``, defaults
included), so a default changed since a run started cannot change its meaning. Resuming with another thread
count, CPU model or device is allowed with a warning (:func:`warn_rounding_change`): the run is as valid, only
not the same to the last digit.
"""

from __future__ import annotations

import json
import logging
import zipfile
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import torch

from fedaug.api import Method
from fedaug.config.identity import result_config
from fedaug.config.load import config_from_dict, config_to_dict, dump_yaml
from fedaug.config.schema import ExperimentConfig
from fedaug.config.yamlio import read_yaml_file
from fedaug.engine.checkpoint import (
    RunStore,
    atomic_write_text,
    check_run_checkpoint,
    corrupt_file,
    read_checkpoint,
    read_jsonl,
)
from fedaug.errors import ConfigError, path_error
from fedaug.runs.resolve import ResolvedRun, build_method
from fedaug.runtime.device import device_facts, device_label
from fedaug.runtime.machine import cpu_facts, write_env

logger = logging.getLogger(__name__)

_ABSENT = object()

SAVED_SECTIONS = ("data", "partition", "model", "method", "train")
"""Sections every ``config.yaml`` a run writes holds (``dump_yaml`` writes the whole config)."""


def saved_result_config(saved_path: Path) -> dict[str, Any]:
    """The flat result config (:func:`~fedaug.config.identity.result_config`) of the run config saved
    at ``saved_path``, re-read through the loader (keys added since get their defaults).

    Raises:
        ConfigError: a file that is not a mapping or lacks a section every saved config has.
    """
    raw = read_yaml_file(saved_path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{saved_path} must hold a mapping of config keys, got {type(raw).__name__}")
    missing = [section for section in SAVED_SECTIONS if section not in raw]
    if missing:  # every saved config has them all: a file cut short
        raise ConfigError(f"{saved_path} is incomplete (no {', '.join(missing)} section)")
    return result_config(config_to_dict(config_from_dict(raw)))


def config_differences(saved_path: Path, config: ExperimentConfig) -> list[str]:
    """Dotted keys (sorted) in which the run config saved at ``saved_path`` and ``config`` differ in results
    (:func:`fedaug.config.identity.changes_results`).

    The saved config is re-read through the loader, so keys added since (with their defaults) compare equal.
    """
    saved = saved_result_config(saved_path)
    current = result_config(config_to_dict(config))
    keys = saved.keys() | current.keys()
    return sorted(k for k in keys if saved.get(k, _ABSENT) != current.get(k, _ABSENT))


def check_existing(
    run_dir: Path, config: ExperimentConfig, method_fn: Callable[[], Method] | None = None
) -> None:
    """Refuses ``config`` in ``run_dir`` when the run there has another config (ConfigError naming the keys,
    the values the run used and the remedies); nothing to check without ``config.yaml`` or a finished round.

    ``method_fn`` builds ``config``'s method (default :func:`~fedaug.runs.resolve.build_method`),
    called only when the run recorded its option values.
    """
    saved_path = run_dir / "config.yaml"
    if not saved_path.exists():
        return
    if not (run_dir / "ckpt" / "latest.pt").exists() and not read_jsonl(run_dir / "metrics.jsonl"):
        # it never finished a round (it failed in round 1): nothing to mix, the new config starts it over
        return
    try:
        diffs = config_differences(saved_path, config)
        saved = saved_result_config(saved_path)
    except ConfigError as exc:
        raise corrupt_file(saved_path, str(exc), "run config") from exc
    labels = list(diffs)
    used = saved_env(run_dir).get("method_config")  # every option the run used, defaults included
    if used is not None and "method.name" not in diffs:
        options = _option_changes(used, (method_fn or partial(build_method, config))())
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


def _option_changes(used: dict[str, Any], method: Method) -> dict[str, str]:
    """The options of ``method`` (as the config would run it) whose values differ from those the run
    ``used``: each one (sorted) with its value now, as JSON.

    Compares the options in effect, defaults included, not the options as given in ``config.yaml``: a method
    default that changes after a run started would otherwise resume it with the new value, and naming the
    value it used (``--set method.<option>=<value>``) finishes it as it started. Options the run did not
    record are left out (a new option's default keeps the behaviour it had without it).
    """
    now = json.loads(json.dumps(asdict(method.config)))  # tuples as lists, as in env.json
    changed = sorted(key for key in used.keys() & now.keys() if used[key] != now[key])
    return {key: json.dumps(now[key]) for key in changed}


def check_checkpoint(run_dir: Path) -> None:
    """Refuses a corrupt ``ckpt/latest.pt`` before the run dir is touched (memory-mapped where it is a zip,
    as ``torch.save`` writes: the tensors are not read; the engine loads the checkpoint when it resumes)."""
    path = RunStore(run_dir).ckpt_path
    if path.exists():
        check_run_checkpoint(read_checkpoint(path, mmap=zipfile.is_zipfile(path)), path)


def saved_env(run_dir: Path) -> dict[str, Any]:
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


def record_run(resolved: ResolvedRun) -> None:
    """Writes the run's record as it (re)starts: ``config.yaml`` (method options as given), then, after
    :func:`warn_rounding_change` has read the previous one, ``env.json`` with every option the run uses,
    defaults included (so a later default change cannot change its meaning: :func:`check_existing`)."""
    run_dir, device = resolved.run_dir, resolved.settings.device
    atomic_write_text(run_dir / "config.yaml", dump_yaml(resolved.config))
    warn_rounding_change(run_dir, device)
    extra = {"dataset_source": resolved.dataset.source, "method_config": asdict(resolved.method.config)}
    write_env(run_dir, {**extra, **device_facts(device), "deterministic": resolved.settings.deterministic})


def warn_rounding_change(run_dir: Path, device: torch.device) -> None:
    """Warns when a run resumes with another torch thread count, on another kind of CPU, or on another device
    (CPU vs a GPU model) than it last ran with (``env.json``; runs from before the CPU was recorded are not
    checked for it; runs from before devices were recorded ran on the CPU).

    Multi-threaded ops split their sums differently (a HARNet round's train loss differs in the 6th digit
    between 1 and 2 threads), and the kernels picked for another CPU round differently
    (:mod:`fedaug.runtime.machine`), so the rest of the run will not be bit-identical to an uninterrupted
    run. Not
    refused: the run is as valid, only not the same to the last digit.
    """
    if not (run_dir / "metrics.jsonl").exists():
        return
    env = saved_env(run_dir)
    before, now = env.get("num_threads"), torch.get_num_threads()
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
    cpu, keys = cpu_facts(), ("cpu_model", "cpu_capability")
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
