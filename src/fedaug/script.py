"""fedaug from Python (scripts, notebooks): the ``fedaug run`` command as three names.

    from fedaug.script import load_config, run

    config = load_config("smoke", overrides={"compare": ["fedavg", "flea"], "train.rounds": 5})
    for result in run(config):
        print(result.method, result.summary["best_acc"], len(result.metrics()))

:func:`load_config` reads presets by name or path (:mod:`fedaug.config.presets`) and overrides exactly as the
command
line's CONFIG arguments and ``--set`` do, :func:`run` runs every compared method as ``fedaug run`` does (the
same run dirs, so a run started on the command line resumes here and the other way round; finished runs are
read back, not run again), and each :class:`RunResult` reads its run dir. Progress goes to the ``fedaug``
logger: ``logging.basicConfig(level=logging.INFO)`` shows it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_run_config
from fedaug.config.presets import DEFAULT
from fedaug.config.schema import ExperimentConfig
from fedaug.engine.checkpoint import read_jsonl
from fedaug.runs.runner import check_experiment, comparison_configs, run_experiment


@dataclass(frozen=True)
class RunResult:
    """One finished run: its method, run dir and ``summary.json`` (``best_acc``, ``best_round``,
    ``last10_acc``, ``final_acc``, as fractions)."""

    method: str
    run_dir: Path
    summary: dict[str, Any]

    def metrics(self) -> list[dict[str, Any]]:
        """Its ``metrics.jsonl``: a dict per round (``round``, ``test/acc``, losses, the method's metrics)."""
        return read_jsonl(self.run_dir / "metrics.jsonl")


def load_config(
    *presets: str | Path, overrides: Sequence[str] | Mapping[str, Any] = (), smoke: bool = False
) -> ExperimentConfig:
    """The config ``fedaug run PRESET ... --set KEY=VALUE ...`` runs (``smoke``: with ``--smoke``).

    Args:
        presets: preset names (``smoke``, ``flea_table1_har``, ``methods/fedprox``) or YAML files, merged in
            order; none: the default preset (the main job).
        overrides: ``key=value`` strings as ``--set`` takes them, or a mapping of keys to values
            (``{"train.rounds": 5, "partition": {"name": "dirichlet", "alpha": 0.3}}``).
        smoke: 2 rounds of 1 local epoch in run dirs of their own.

    Raises:
        ConfigError: an unknown preset, key or value (naming it and the valid choices).
        TypeError: a preset that is not a name or path, or overrides that are neither a list nor a mapping
            (one ``"key=value"`` string too: give a list).
    """
    bad = [p for p in presets if not isinstance(p, str | Path)]
    if bad or isinstance(overrides, str) or not isinstance(overrides, Sequence | Mapping):
        raise TypeError(
            f"load_config takes preset names or paths and overrides as a list of 'key=value' strings or a "
            f"mapping, got presets {presets!r} and overrides {overrides!r}"
        )
    items = overrides.items() if isinstance(overrides, Mapping) else None
    sets = [f"{key}={json.dumps(value)}" for key, value in items] if items is not None else list(overrides)
    return load_run_config(list(presets) or [DEFAULT], sets, smoke=smoke)


def run(config: ExperimentConfig, *, fresh: bool = False) -> list[RunResult]:
    """Runs ``config``'s compared methods one after the other (or its one method), as ``fedaug run`` does.

    Every method's options and run dir are checked before the first run starts. A finished run is read back,
    an interrupted one resumes; ``fresh`` discards existing run dirs first (their results are lost).
    """
    if not isinstance(config, ExperimentConfig):  # run("smoke") would fail deep inside with an AttributeError
        raise TypeError(
            f"run takes the ExperimentConfig of load_config, got {type(config).__name__} {config!r}: "
            f"run(load_config({config!r}))"
        )
    configs = comparison_configs(config)
    for sub in configs:
        check_experiment(sub, fresh=fresh)
    return [RunResult(sub.method.name, run_dir_for(sub), run_experiment(sub, fresh=fresh)) for sub in configs]
