"""docs/methods/baselines.md's evidence: the drift-correction and server-optimizer baselines and the reference
runs on FSDD (issue #66), beside FedAvg and ``flea``, from ``studies/flea_fsdd/runs``."""

from __future__ import annotations

from collections.abc import Sequence

from fedaug.results.store import Run
from tools.results.common import (
    BEST,
    FSDD,
    FSDD_SPLITS,
    LAST10,
    Archive,
    cell,
    fragment,
    gain_cell,
    off_reference,
    seeds_of,
    try_gain,
)
from tools.results.fragments import markdown_table

FSDD_DRIFT_ROWS = {
    "local (each client alone: the floor)": "local",
    "FedAvg": "fedavg",
    "SCAFFOLD": "scaffold",
    "FedDyn": "feddyn",
    "FedNova": "fednova",
    "FedAvgM": "fedavgm",
    "FedAdam": "fedadam",
    "FedYogi": "fedyogi",
    "FedAdagrad": "fedadagrad",
    "`flea`": "flea",
    "centralized (pooled data: the ceiling)": "centralized",
}
"""Row label -> method key, floor first and ceiling last."""
SETTINGS = tuple(f"fsdd {split} K=27" for split in FSDD_SPLITS)


def _cell(runs: Sequence[Run]) -> str:
    text = cell(runs, BEST, LAST10)
    return text if text == "-" else f"{text} ({seeds_of(runs)})"


@fragment("fsdd-drift-baselines")
def fsdd_drift_baselines(archive: Archive) -> str:
    """Best / last-10 of every new baseline and reference run at K = 27, with the seeds each cell has, and
    each one's paired last-10 gain over FedAvg."""
    runs = {row: [archive.runs(FSDD, row, s) for s in SETTINGS] for row in FSDD_DRIFT_ROWS.values()}
    rows = [[name, *(_cell(r) for r in runs[row])] for name, row in FSDD_DRIFT_ROWS.items()]
    gains = [
        [
            f"{name.split(' (')[0]} − FedAvg, last-10, paired",
            *(gain_cell(try_gain(runs[row][i], runs["fedavg"][i], LAST10), count=True) for i in range(3)),
        ]
        for name, row in FSDD_DRIFT_ROWS.items()
        if row != "fedavg"
    ]
    cells = {f"{row} {s}": archive.runs(FSDD, row, s) for row in runs for s in SETTINGS}
    return markdown_table(["method", *FSDD_SPLITS], rows + gains) + off_reference(cells)
