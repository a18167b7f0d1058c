"""``engine.branch_from_fedavg``: a run whose first rounds are FedAvg's starts from FedAvg's checkpoint.

The FedAvg run is the sibling run dir of the same name, setting and seed (``.../fedavg/seed<k>``, as a sweep
over methods makes it; a sweep point's ``method.*`` options, which the sweep appends to the name, are left out
of it: :func:`fedavg_name`); its config must equal this run's except for the method and the engine settings.
It needs a checkpoint at or before the method's last FedAvg round: the FedAvg run keeps one with
``engine.keep_checkpoints`` (e.g. ``[79]`` for Fed-ZDA's ``start_round: 80``), or its ``latest.pt`` is early
enough. Without one the run starts from round 1, with the same results (see :mod:`fedaug.engine.branch`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from fedaug.api import Method, RunContext
from fedaug.engine.branch import branch_from_fedavg
from fedaug.errors import ConfigError
from fedaug.experiments.config import ExperimentConfig, MethodSpec
from fedaug.experiments.identity import result_config
from fedaug.experiments.load import config_from_dict, config_to_dict
from fedaug.experiments.naming import format_suffix, parse_suffix
from fedaug.yamlio import read_yaml_file

logger = logging.getLogger(__name__)

_ABSENT = object()

SAVED_SECTIONS = ("data", "partition", "model", "method", "train")
"""Sections every ``config.yaml`` a run writes holds (``dump_yaml`` writes the whole config)."""


def config_differences(saved_path: Path, config: ExperimentConfig) -> list[str]:
    """Dotted keys (sorted) in which the run config saved at ``saved_path`` and ``config`` differ in results
    (:func:`fedaug.experiments.identity.changes_results`).

    The saved config is re-read through the loader, so keys added since (with their defaults) compare equal.
    """
    saved = saved_result_config(saved_path)
    current = result_config(config_to_dict(config))
    keys = saved.keys() | current.keys()
    return sorted(k for k in keys if saved.get(k, _ABSENT) != current.get(k, _ABSENT))


def saved_result_config(saved_path: Path) -> dict[str, Any]:
    """The flat result config (:func:`~fedaug.experiments.identity.result_config`) of the run config saved at
    ``saved_path``, re-read through the loader (keys added since get their defaults).

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


def fedavg_name(name: str) -> str:
    """The experiment name of the FedAvg run a sweep point of ``name`` branches from.

    A sweep appends its non-path grid values to the name as a last segment ``key=value,...``
    (``default/method.variant=shared_features``); FedAvg has none of the ``method.*`` ones, so they are
    dropped (and the segment with them when nothing else is left).
    """
    head, _, last = name.rpartition("/")
    items = parse_suffix(last)
    if not head or items is None:
        return name
    kept = [(key, value) for key, value in items if not key.startswith("method.")]
    return f"{head}/{format_suffix(kept)}" if kept else head


def start_from_fedavg(
    config: ExperimentConfig, run_dir: Path, method: Method, run: RunContext, fedavg_dir: Path
) -> int:
    """Branches ``run_dir`` off the FedAvg run in ``fedavg_dir`` where the method allows it; returns the round
    it starts after (0: from round 1).

    Raises:
        ConfigError: if the FedAvg run dir holds a run of another setting.
    """
    if method.fedavg_rounds(run) == 0 or fedavg_dir.resolve() == run_dir.resolve():
        logger.debug("%s has no FedAvg rounds to branch from", config.method.name)
        return 0
    saved_path = fedavg_dir / "config.yaml"
    if saved_path.exists():
        diffs = config_differences(saved_path, replace(config, method=MethodSpec(name="fedavg")))
        if diffs:
            raise ConfigError(
                f"engine.branch_from_fedavg: {fedavg_dir} holds a FedAvg run of another setting (differs in: "
                f"{', '.join(diffs)}); run FedAvg with this run's settings there, or set "
                "engine.branch_from_fedavg=false"
            )
    return branch_from_fedavg(fedavg_dir, run_dir, method, run, max_round=config.train.rounds)
