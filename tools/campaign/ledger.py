"""What a campaign has already done: the runs archived under the studies folder, found by identity, and what
their rounds cost.

A grid point counts as done when a *finished* archived run anywhere under the studies folder has the same
result config (:func:`~fedaug.runs.resume.saved_result_config`: every key that changes results, so
not the name, the folder, the device or the engine's settings), whatever its path: the K = 75 baselines that
``studies/baselines_har`` archived under the name ``default`` are points of FLea Table 1 too.

A point's cost is its rounds left times the mean round time (``timings.jsonl``'s ``round_time``) of the
archived runs of the same dataset, model, method and client count that ran on the same device kind
(``env.json``), measured as they ran (on a GPU: packed beside the other runs of their sweep) and scaled to
this host by the hosts' probes where both are known (:mod:`fedaug.sweeps.archived`, which fedaug's own
estimates read too), plus
:data:`RUN_START_S`; where none exists, the grid's cost table in the campaign file (seconds per run).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedaug.config.identity import result_config
from fedaug.config.load import config_to_dict
from fedaug.engine.checkpoint import logged_round_times
from fedaug.runs.resume import finished_summary
from fedaug.sweeps.archived import Archive, device_kind, identity
from fedaug.sweeps.estimate import rounds_logged
from fedaug.sweeps.order import SweepPoint
from tools.campaign.spec import Grid

RUN_START_S = {"cuda": 10.0, "cpu": 5.0}
"""Seconds a run takes besides its rounds (process, data, CUDA context), added to a cost from round times: on
an H100 a FedAvg run alone took 20.8 s, 12.5 s of them rounds (README); a smoke run here about 5 s."""


def point_identity(point: SweepPoint) -> str:
    """The identity of a grid point's run."""
    return identity(result_config(config_to_dict(point.config)))


class Ledger:
    """The archived runs under ``studies`` (any depth), read once."""

    def __init__(self, studies: Path, probe_s: float | None = None) -> None:
        """``probe_s``: this host's probe (:func:`fedaug.sweeps.probe.host_probe`); archived round times of
        hosts whose probe is known are scaled to it (:meth:`fedaug.sweeps.archived.Archive.round_time`), the
        others taken as they are."""
        self.studies = studies
        self.probe_s = probe_s
        self.archive = Archive(studies)
        self.runs = self.archive.runs
        self._done: dict[str, Path] = {}
        for run in self.runs:
            if run.finished:
                self._done.setdefault(run.identity, run.path)

    def archived(self, point: SweepPoint) -> Path | None:
        """The finished archived run of ``point``'s identity, or None."""
        return self._done.get(point_identity(point))

    def spent(self, run_dir: Path, kind: str) -> float | None:
        """Seconds the archived run in ``run_dir`` spent in its logged rounds, if it ran on ``kind`` (None:
        another device kind, or no round timed)."""
        if device_kind(run_dir) != kind:
            return None
        times = [seconds for _, seconds in logged_round_times(run_dir)]
        return sum(times) if times else None

    def round_seconds(self, point: SweepPoint, kind: str) -> float | None:
        """Mean round time of the archived runs like ``point`` on ``kind`` (None: none timed)."""
        flat: Mapping[str, Any] = result_config(config_to_dict(point.config))
        found = self.archive.round_time(flat, kind, self.probe_s)
        return None if found is None else found.seconds

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
