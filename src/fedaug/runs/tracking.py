"""Runs to watch in experiment trackers: ``tracking: [tensorboard, mlflow]`` (``fedaug[tracking]``).

A run with ``--set 'tracking=[tensorboard]'`` also writes TensorBoard event files to ``RUN_DIR/tensorboard/``
(``tensorboard --logdir runs`` shows every run under ``runs/``, one per run dir):

* per round (step = round): every number of the round's ``metrics.jsonl`` line under its own name
  (``test/acc``, ``test/loss``, ``train/loss``, ``lr``, the fairness and method metrics) and its
  ``timings.jsonl`` phases as ``time/<phase>`` (``time/round_time``: the round's seconds);
* at the end: the summary as ``summary/<key>`` at the last round, and the resolved config as TensorBoard's
  hyper-parameters (every key, flattened: ``train.lr``, ``method.name``, ...) with the summary's numbers as
  their metrics, and as text (``config``, the run's ``config.yaml``).

``mlflow`` keeps one MLflow run per run dir in a local store shared by every run of the same sweep (or
job): ``OUT_DIR/<sweep name>/mlflow/mlflow.db`` (SQLite: MLflow 3 refuses its file store by default;
``mlflow ui --backend-store-uri sqlite:///runs/<name>/mlflow/mlflow.db``), in one experiment named by the
sweep (the config's ``name`` without the grid values a sweep appends, :func:`sweep_name`), so that the UI
compares a sweep's runs side by side. Each MLflow run is named by its run dir inside the sweep's folder
(``uci_har-quantity2-K75/flea/seed0``) and tagged ``fedaug.sweep``, ``fedaug.grid`` (those grid values),
``fedaug.setting``, ``fedaug.method``, ``fedaug.seed`` and ``fedaug.run_dir`` (:func:`run_tags`), and holds
the same per-round metrics (step = round), the resolved config as params, the summary as ``summary/<key>``
metrics, ``config.yaml`` as an artifact, and the run FINISHED (KILLED while stopped). A sweep's workers take
a file lock on the store while one of them creates it and the experiment; SQLite serializes their writes.
The run's id is kept in ``RUN_DIR/mlflow/run_id``: a resume reopens the same MLflow run and logs only the
rounds the store lacks, so no step is logged twice (a run dir tracked in its own ``RUN_DIR/mlflow/mlflow.db``
before the store was shared keeps using that one). TensorBoard's files are one folder per run dir, so
``tensorboard --logdir runs/<name>`` shows a sweep's runs side by side, each named by its run dir.

A resumed run continues the same TensorBoard curves: its writer opens a new event file with ``purge_step`` at
the last checkpointed round c, so TensorBoard drops what the stopped process wrote from round c on, and
writes round c again from ``metrics.jsonl`` and ``timings.jsonl`` (a process stopped between c's checkpoint
and its events wrote none), then c + 1 on: each round's step once. A run resumed with
``tracking`` it did not have before writes its earlier rounds first, from the same logs. Events are flushed
every round. The engine only calls the :class:`~fedaug.engine.simulation.RoundObserver` protocol;
TensorBoard's writer (``torch.utils.tensorboard``, which needs the ``tensorboard`` package) is imported when
a run asks for it.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from fedaug.config.identity import flatten, format_suffix, parse_suffix
from fedaug.config.load import config_to_dict, dump_yaml
from fedaug.config.schema import ExperimentConfig
from fedaug.engine.simulation import RoundObserver
from fedaug.errors import ConfigError

TENSORBOARD_DIR = "tensorboard"
"""The event files' folder inside a run dir."""


MLFLOW_DIR = "mlflow"
"""The MLflow store's folder inside a run dir (``mlflow.db``, ``artifacts/``, ``run_id``)."""


def sweep_name(name: str) -> tuple[str, list[tuple[str, str]]]:
    """A run's sweep name and grid values: ``flea_table1_har/method.variant=shared_features`` ->
    ``("flea_table1_har", [("method.variant", "shared_features")])`` (a sweep appends its non-path grid values
    to the name as a last segment, :func:`~fedaug.config.identity.fedavg_name`); a plain name has none."""
    head, _, last = name.rpartition("/")
    items = parse_suffix(last)
    return (head, items) if head and items is not None else (name, [])


def shared_store(config: ExperimentConfig) -> Path:
    """The MLflow store of every run of ``config``'s sweep (or job): ``out_dir/<sweep name>/mlflow``."""
    return Path(config.out_dir) / sweep_name(config.name)[0] / MLFLOW_DIR


def run_tags(config: ExperimentConfig, run_dir: Path, root: Path) -> tuple[str, dict[str, str]]:
    """A run's MLflow run name (its run dir inside the sweep's folder ``root``) and the tags that tell a
    sweep's runs apart in MLflow's UI and searches (``tags.`fedaug.method` = 'flea'``)."""
    name, grid = sweep_name(config.name)
    relative = run_dir.relative_to(root) if run_dir.is_relative_to(root) else run_dir
    return str(relative), {
        "fedaug.sweep": name,
        "fedaug.grid": format_suffix(grid),
        "fedaug.setting": run_dir.parents[1].name,
        "fedaug.method": config.method.name,
        "fedaug.seed": str(config.seed),
        "fedaug.run_dir": str(run_dir),
    }


@contextlib.contextmanager
def _store_lock(store: Path) -> Iterator[None]:
    """Holds ``store/.lock`` (an OS file lock, waiting for it): the processes of a sweep that start together
    would otherwise race to create the SQLite database's tables and the experiment."""
    import fcntl

    with open(store / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def open_trackers(config: ExperimentConfig, run_dir: Path) -> tuple[RoundObserver, ...]:
    """The round observers ``config.tracking`` asks for (none by default).

    Raises:
        ConfigError: a tracker whose package is not installed (with the install line).
    """
    trackers: list[RoundObserver] = []
    for name in dict.fromkeys(config.tracking):
        if name == "tensorboard":
            trackers.append(TensorBoardTracker(config, run_dir / TENSORBOARD_DIR))
        elif name == "mlflow":
            trackers.append(MLflowTracker(config, run_dir / MLFLOW_DIR))
    return tuple(trackers)


def check_trackers(config: ExperimentConfig) -> None:
    """Raises a one-line install hint when a tracker ``config.tracking`` names is not installed (checked
    before the run starts, so no round is trained without its curves)."""
    import importlib.util

    for name, package in (("tensorboard", "tensorboard"), ("mlflow", "mlflow")):
        if name in config.tracking and importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"tracking: {name} needs the {package} package: pip install 'fedaug[tracking]' "
                "(or leave it out of tracking)"
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


def _timings(path: Path) -> dict[int, dict[str, Any]]:
    """A run's ``timings.jsonl`` lines by round (a last line cut short by a kill left out; {} if none)."""
    try:
        lines = path.read_text().splitlines()
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
            timings = _timings(self.log_dir.parent / "timings.jsonl")
            for record in records[-1:] if written_before else records:
                self.round(record, timings.get(int(record["round"]), {}))

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


class MLflowTracker:
    """One MLflow run per run dir, in a local SQLite store under it (module docstring)."""

    def __init__(self, config: ExperimentConfig, store_dir: Path) -> None:
        self.config = config
        self.store_dir = store_dir
        self.client: Any = None
        self.run_id: str | None = None
        self.finished = False

    def start(self, first_round: int, records: list[dict[str, Any]]) -> None:
        import logging

        for name in ("mlflow", "alembic"):  # their database set-up logs INFO lines of no use to a user
            logging.getLogger(name).setLevel(logging.WARNING)
        from mlflow.tracking import MlflowClient

        run_dir = self.store_dir.parent
        self.store_dir.mkdir(parents=True, exist_ok=True)
        own_store = self.store_dir / "mlflow.db"  # a run tracked before sweeps shared one keeps its own
        store = self.store_dir if own_store.is_file() else shared_store(self.config)
        store.mkdir(parents=True, exist_ok=True)
        id_file = self.store_dir / "run_id"
        with _store_lock(store):  # a sweep's workers: one creates the database and the experiment
            self.client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
            if id_file.is_file():  # a resume: the same MLflow run, running again
                self.run_id = id_file.read_text().strip()
                self.client.update_run(self.run_id, status="RUNNING")
            else:
                experiment_name = sweep_name(self.config.name)[0]
                experiment = self.client.get_experiment_by_name(experiment_name)
                experiment_id = (
                    experiment.experiment_id
                    if experiment is not None
                    else self.client.create_experiment(
                        experiment_name, artifact_location=(store / "artifacts").as_uri()
                    )
                )
                run_name, tags = run_tags(self.config, run_dir, store.parent)
                run = self.client.create_run(experiment_id, run_name=run_name, tags=tags)
                self.run_id = run.info.run_id
                self._log_params()
                id_file.write_text(f"{self.run_id}\n")
        logged = self.client.get_metric_history(self.run_id, "time/round_time")
        last_logged = max((m.step for m in logged), default=0)
        timings = _timings(self.store_dir.parent / "timings.jsonl")
        for record in records:  # the rounds before this process that the store does not have yet
            if int(record["round"]) > last_logged:
                self.round(record, timings.get(int(record["round"]), {}))

    def _log_params(self) -> None:
        from mlflow.entities import Param

        params = [Param(key, str(value)[:6000]) for key, value in hyper_parameters(self.config).items()]
        for at in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[at : at + 100])

    def _log(self, values: dict[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, step) for key, value in values.items()]
        for at in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[at : at + 1000])

    def round(self, record: dict[str, Any], timing: dict[str, Any]) -> None:
        timing = {k: v for k, v in timing.items() if k != "startup"}
        self._log({**scalars(record), **scalars(timing, "time/")}, int(record["round"]))

    def finish(self, summary: dict[str, Any]) -> None:
        self._log(scalars(summary, "summary/"), self.config.train.rounds)
        self.client.log_text(self.run_id, dump_yaml(self.config), "config.yaml")
        self.client.set_terminated(self.run_id, status="FINISHED")
        self.finished = True

    def close(self) -> None:
        """Marks a run that stopped early KILLED (its resume sets it RUNNING again)."""
        if self.client is not None and self.run_id is not None and not self.finished:
            self.client.set_terminated(self.run_id, status="KILLED")
        self.client = None
