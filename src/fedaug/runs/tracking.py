"""Runs to watch in an experiment tracker: ``tracking: [tensorboard]`` (``pip install 'fedaug[tracking]'``).

A run with ``--set 'tracking=[tensorboard]'`` also writes TensorBoard event files to ``RUN_DIR/tensorboard/``
(``tensorboard --logdir runs`` shows every run under ``runs/``, one per run dir):

* per round (step = round): every number of the round's ``metrics.jsonl`` line under its own name
  (``test/acc``, ``test/loss``, ``train/loss``, ``lr``, the fairness and method metrics) and its
  ``timings.jsonl`` phases as ``time/<phase>`` (``time/round_time``: the round's seconds);
* at the end: the summary as ``summary/<key>`` at the last round, and the resolved config as TensorBoard's
  hyper-parameters (every key, flattened: ``train.lr``, ``method.name``, ...) with the summary's numbers as
  their metrics, and as text (``config``, the run's ``config.yaml``).

A resumed run continues the same curves: its writer opens a new event file with ``purge_step`` at the last
checkpointed round c, so TensorBoard drops whatever the stopped process wrote from round c on (a round it
logged after its checkpoint, which the resume trains again), and the new file writes round c again from
``metrics.jsonl`` and ``timings.jsonl``, then c + 1 on: each round's step once. A run resumed with
``tracking`` it did not have before writes its earlier rounds first, from the same logs. Events are flushed
every round. The engine only calls the :class:`~fedaug.engine.simulation.RoundObserver` protocol;
TensorBoard's writer (``torch.utils.tensorboard``, which needs the ``tensorboard`` package) is imported when
a run asks for it.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedaug.config.identity import flatten
from fedaug.config.load import config_to_dict, dump_yaml
from fedaug.config.schema import ExperimentConfig
from fedaug.engine.simulation import RoundObserver
from fedaug.errors import ConfigError

TENSORBOARD_DIR = "tensorboard"
"""The event files' folder inside a run dir."""


def open_trackers(config: ExperimentConfig, run_dir: Path) -> tuple[RoundObserver, ...]:
    """The round observers ``config.tracking`` asks for (none by default).

    Raises:
        ConfigError: a tracker whose package is not installed (with the install line).
    """
    trackers: list[RoundObserver] = []
    for name in dict.fromkeys(config.tracking):
        if name == "tensorboard":
            trackers.append(TensorBoardTracker(config, run_dir / TENSORBOARD_DIR))
    return tuple(trackers)


def check_trackers(config: ExperimentConfig) -> None:
    """Raises a one-line install hint when a tracker ``config.tracking`` names is not installed (checked
    before the run starts, so no round is trained without its curves)."""
    import importlib.util

    if "tensorboard" in config.tracking and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            "tracking: tensorboard needs the tensorboard package: pip install 'fedaug[tracking]' "
            "(or leave tracking out)"
        )


def scalars(record: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of a log line (not its ``round``; bools, lists and text left out)."""
    found = {}
    for key, value in record.items():
        if key == "round" or isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        if math.isfinite(float(value)):
            found[f"{prefix}{key}"] = float(value)
    return found


def hyper_parameters(config: ExperimentConfig) -> dict[str, str | float | int | bool]:
    """The resolved config flattened to TensorBoard's hyper-parameter types (lists and None as text)."""
    flat = flatten(config_to_dict(config))
    return {
        key: value if isinstance(value, str | int | float | bool) else json.dumps(value)
        for key, value in flat.items()
    }


class TensorBoardTracker:
    """TensorBoard event files of one run (module docstring)."""

    def __init__(self, config: ExperimentConfig, log_dir: Path) -> None:
        self.config = config
        self.log_dir = log_dir
        self.writer: Any = None

    def start(self, first_round: int, records: list[dict[str, Any]]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        resumed = first_round > 1
        written_before = self.log_dir.is_dir() and any(self.log_dir.iterdir())
        purge = first_round - 1 if resumed and written_before else None
        self.writer = SummaryWriter(str(self.log_dir), purge_step=purge)
        if resumed and records:
            # the last checkpointed round again (the stopped process's copy is purged), or every round before
            # the resume when tracking is new to this run (it changes no result, so a resume may turn it on)
            timings = self._timings()
            for record in records[-1:] if written_before else records:
                self.round(record, timings.get(int(record["round"]), {}))

    def _timings(self) -> dict[int, dict[str, Any]]:
        """The run's ``timings.jsonl`` lines by round (a last line cut short by a kill left out)."""
        try:
            lines = (self.log_dir.parent / "timings.jsonl").read_text().splitlines()
        except OSError:
            return {}
        found = {}
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("round"), int):
                found[entry["round"]] = entry
        return found

    def round(self, record: dict[str, Any], timing: dict[str, Any]) -> None:
        step = int(record["round"])
        timing = {k: v for k, v in timing.items() if k != "startup"}
        for tag, value in {**scalars(record), **scalars(timing, "time/")}.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def finish(self, summary: dict[str, Any]) -> None:
        from torch.utils.tensorboard.summary import hparams

        step = self.config.train.rounds
        metrics = scalars(summary, "summary/")
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)
        for part in hparams(hyper_parameters(self.config), metrics):  # type: ignore[no-untyped-call]
            self.writer.file_writer.add_summary(part, step)
        self.writer.add_text("config", "```yaml\n" + dump_yaml(self.config) + "\n```", step)
        self.close()

    def close(self) -> None:
        """Flushes and closes the event file (also when the run stops early)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
