"""What a campaign has already done: the runs archived under the studies folder, found by identity, and what
their rounds cost.

A grid point counts as done when a *finished* archived run anywhere under the studies folder has the same
result config (:func:`~fedaug.runs.resume.saved_result_config`: every key that changes results, so
not the name, the folder, the device or the engine's settings), whatever its path: the K = 75 baselines that
``studies/baselines_har`` archived under the name ``default`` are points of FLea Table 1 too.

A point's cost is its rounds left times the mean round time (``timings.jsonl``'s ``round_time``) of the
archived runs of the same dataset, model, method and client count that ran on the same device kind
(``env.json``), measured as they ran (on a GPU: packed beside the other runs of their sweep) and scaled to
this host by the hosts' probes where both were probed (:mod:`tools.campaign.probe`), plus
:data:`RUN_START_S`; where none exists, the grid's cost table in the campaign file (seconds per run).
"""

from __future__ import annotations

import json
import logging
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedaug.config.identity import result_config
from fedaug.config.load import config_to_dict
from fedaug.engine.checkpoint import logged_round_times
from fedaug.errors import FedaugError
from fedaug.runs.resume import finished_summary, saved_env, saved_result_config
from fedaug.sweeps.estimate import rounds_logged
from fedaug.sweeps.order import SweepPoint
from tools.campaign.probe import speed_ratio
from tools.campaign.spec import Grid

logger = logging.getLogger(__name__)

RUN_START_S = {"cuda": 10.0, "cpu": 5.0}
"""Seconds a run takes besides its rounds (process, data, CUDA context), added to a cost from round times: on
an H100 a FedAvg run alone took 20.8 s, 12.5 s of them rounds (README); a smoke run here about 5 s."""

_COST_KEYS = ("data.name", "model.name", "method.name", "partition.num_clients", "partition.mean_local_size")


def identity(flat: Mapping[str, Any]) -> str:
    """A result config (flat) as one comparable string."""
    return json.dumps(dict(flat), sort_keys=True, default=str)


def point_identity(point: SweepPoint) -> str:
    """The identity of a grid point's run."""
    return identity(result_config(config_to_dict(point.config)))


def cost_key(flat: Mapping[str, Any]) -> tuple[Any, ...]:
    """Which runs' round times cost a run: dataset, model, method and client count."""
    return tuple(flat.get(key) for key in _COST_KEYS)


def device_kind(run_dir: Path) -> str | None:
    """``cuda`` or ``cpu`` from the run's ``env.json`` (None: not recorded)."""
    device = saved_env(run_dir).get("device")
    return str(device).split(":")[0] if device else None


@dataclass(frozen=True)
class ArchivedRun:
    """A run dir under the studies folder: where, its identity, whether finished, its mean round time."""

    path: Path
    identity: str
    finished: bool
    cost_key: tuple[Any, ...]
    kind: str | None
    round_seconds: float | None
    probe_s: float | None = None
    """The host's probe when it ran (``env.json``'s ``host_probe_s``; None: not probed)."""


def read_archived(run_dir: Path) -> ArchivedRun | None:
    """The run in ``run_dir`` (None: its ``config.yaml`` is not a readable run config)."""
    try:
        flat = saved_result_config(run_dir / "config.yaml")
    except FedaugError as exc:  # not a run config, or one of keys removed since
        logger.debug("not a run: %s (%s)", run_dir, exc)
        return None
    rounds = flat.get("train.rounds")
    times = [seconds for _, seconds in logged_round_times(run_dir)]
    return ArchivedRun(
        path=run_dir,
        identity=identity(flat),
        finished=isinstance(rounds, int) and finished_summary(run_dir, rounds) is not None,
        cost_key=cost_key(flat),
        kind=device_kind(run_dir),
        round_seconds=statistics.fmean(times) if times else None,
        probe_s=_probe_of(run_dir),
    )


def _probe_of(run_dir: Path) -> float | None:
    value = saved_env(run_dir).get("host_probe_s")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class Ledger:
    """The archived runs under ``studies`` (any depth), read once."""

    def __init__(self, studies: Path, probe_s: float | None = None) -> None:
        """``probe_s``: this host's probe (``tools.campaign.probe.host_probe``); archived round times of
        probed hosts are scaled to it (``speed_ratio``), the others taken as they are."""
        self.studies = studies
        self.probe_s = probe_s
        self.runs = [
            run
            for path in sorted(studies.rglob("config.yaml"))
            if (run := read_archived(path.parent)) is not None
        ]
        self._done: dict[str, Path] = {}
        self._times: dict[tuple[Any, ...], list[float]] = defaultdict(list)
        for run in self.runs:
            if run.finished:
                self._done.setdefault(run.identity, run.path)
            if run.round_seconds is not None and run.kind is not None:
                scale = speed_ratio(probe_s, run.probe_s)
                self._times[(*run.cost_key, run.kind)].append(run.round_seconds * scale)

    def archived(self, point: SweepPoint) -> Path | None:
        """The finished archived run of ``point``'s identity, or None."""
        return self._done.get(point_identity(point))

    def round_seconds(self, point: SweepPoint, kind: str) -> float | None:
        """Mean round time of the archived runs like ``point`` on ``kind`` (None: none timed)."""
        flat = result_config(config_to_dict(point.config))
        times = self._times.get((*cost_key(flat), kind))
        return statistics.fmean(times) if times else None

    def cost(self, point: SweepPoint, grid: Grid, kind: str) -> float | None:
        """Seconds ``point`` still needs on ``kind``: its rounds left (those its run dir has not logged) at
        the archived runs' round time, else its share of the grid's cost table; None: no estimate."""
        rounds = point.config.train.rounds
        left = max(rounds - rounds_logged(point), 0) if finished_summary(point.run_dir, rounds) is None else 0
        per_round = self.round_seconds(point, kind)
        if per_round is not None:
            return left * per_round + (RUN_START_S.get(kind, 0.0) if left else 0.0)
        per_run = grid.table_cost(kind, point.config.method.name)
        return None if per_run is None else per_run * left / rounds
