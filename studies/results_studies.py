"""The generated blocks of the study READMEs (``studies/<name>/README.md``): the same archives, helpers and
statistics as docs/results.md, in the shape each study's page reports them."""

from __future__ import annotations

from results_common import (
    CLASS_VAR,
    CLASS_VAR_LAST10,
    FINAL,
    GLOBAL_LAST10,
    LOCAL_MEAN,
    LOCAL_VAR,
    LOCAL_VAR_LAST10,
    ZDA,
    ZDA_CELLS,
    Archive,
    fragment,
    gain_cell,
    paper_gap,
    slash,
    stat,
    try_gain,
)

from fedaug.results.fragments import Metric, markdown_table
from fedaug.results.store import Run, Stat

# --- studies/fedzda ---------------------------------------------------------------------------------------

ZDA_BASE = (*ZDA, "fedzda/cpu_drift/runs")
"""FedAvg's runs for the paired gains: seed 2's rerun on the Xeon its Fed-ZDA runs ran on comes with them."""
ZDA_SEED0_ROWS = {
    "FedAvg": "fedavg",
    "FedProx": "fedprox",
    "q-FFL (q = 1)": "qffl",
    "Fed-ZDAC": "fedzdac",
    "Fed-ZDAS (batch-10 server step)": "fedzdas (server_batch_size=10)",
}
"""The rows of the first sessions' one-seed tables: q-FFL and Fed-ZDAS as they were run then."""
ZDA_GAIN_ROWS = {"FedProx": "fedprox", "q-FFL (q = 0.01)": "qffl (q=0.01)", "Fed-ZDAC": "fedzdac"}
ZDA_GAIN_ROWS["Fed-ZDAS"] = "fedzdas"


def _paper(stat_: Stat | None) -> str:
    """A published ``mean ± std`` as the paper prints it; ``-`` where it has none."""
    return "-" if stat_ is None else f"{stat_.mean:g} ± {stat_.std:g}"


def _value(runs: list[Run], metric: Metric, digits: int) -> str:
    found = stat(runs, metric)
    return "-" if found is None else f"{found.mean:.{digits}f}"


def _seed0_table(archive: Archive, setting: str) -> str:
    """Seed 0's final round at both fairness levels, the paper's mean ± std beside, and seed 0's last-10
    means: the tables of the sessions that ran one seed."""
    rows, last10 = [], []
    ours = ((LOCAL_MEAN, 2), (LOCAL_VAR, 1), (FINAL, 2), (CLASS_VAR, 1))
    later = {"global %": (GLOBAL_LAST10, 2), "local variance %^2": (LOCAL_VAR_LAST10, 1)}
    later["class variance %^2"] = (CLASS_VAR_LAST10, 1)
    papers = ("local_acc_mean", "local_acc_var", "global_acc", "class_acc_var")
    for name, row in ZDA_SEED0_ROWS.items():
        runs = [r for r in archive.runs(ZDA, row, setting) if r.seed == 0]
        method = row.split(" ")[0]
        rows.append([name, *(_value(runs, m, d) for m, d in ours)])
        rows[-1] += [_paper(archive.paper(p, method, runs)) for p in papers]
        last10.append([_value(runs, m, d) for m, d in later.values()])
    header = ["method", "local mean %", "local variance %^2", "global %", "class variance %^2"]
    header += ["paper local mean", "paper local var", "paper global", "paper class var"]
    columns = zip(later, zip(*last10, strict=True), strict=True)
    text = ", ".join(f"{what} {slash(list(values))}" for what, values in columns)
    names = " / ".join(ZDA_SEED0_ROWS)
    return markdown_table(header, rows) + f"\nSeed 0's last-10 means ({names}): {text}.\n"


@fragment("fedzda-seed0-fmnist-unimodal")
def fedzda_seed0_fmnist(archive: Archive) -> str:
    return _seed0_table(archive, ZDA_CELLS["FMNIST unimodal"])


@fragment("fedzda-seed0-mnist-unimodal")
def fedzda_seed0_mnist(archive: Archive) -> str:
    return _seed0_table(archive, ZDA_CELLS["MNIST unimodal"])


@fragment("fedzda-last10-gains")
def fedzda_last10_gains(archive: Archive) -> str:
    """Each method minus FedAvg paired by seed over the last 10 rounds: global accuracy (points ± std) and
    class variance (%^2, mean); in brackets the difference of the paper's final-round means."""
    rows = []
    for name, row in ZDA_GAIN_ROWS.items():
        cells = [name]
        for setting in ZDA_CELLS.values():
            runs, base = archive.runs(ZDA, row, setting), archive.runs(ZDA_BASE, "fedavg", setting)
            accuracy, variance = (try_gain(runs, base, m) for m in (GLOBAL_LAST10, CLASS_VAR_LAST10))
            method = row.split(" ")[0]
            gaps = [
                paper_gap(archive, "global_acc", method, "fedavg", runs),
                paper_gap(archive, "class_acc_var", method, "fedavg", runs, "+g"),
            ]
            spread = "-" if variance is None else f"{round(variance.stat.mean) + 0:+d}"
            cells.append(f"{gain_cell(accuracy)} / {spread} ({slash(gaps)})")
        rows.append(cells)
    header = ["paired gain over FedAvg, last 10 rounds: points / class var %^2 (paper: final round)"]
    return markdown_table([*header, *ZDA_CELLS], rows)
