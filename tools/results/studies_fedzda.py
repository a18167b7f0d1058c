"""The run-based generated blocks of studies/fedzda/README.md: the seed-0 tables of the first sessions, the
grid's client-level table and paired last-10 gains, the per-session tables (rounds 80-100, seed 1, the
multimodal seed 0, q-FFL's q, the complete unimodal cells) and every archived run; the blocks read from the
study's JSON files are in ``results_studies_fedzda_json.py``."""

from __future__ import annotations

import statistics

from fedaug.results.store import Run, Stat
from tools.results.common import (
    CLASS_VAR,
    CLASS_VAR_LAST10,
    FINAL,
    GLOBAL_LAST10,
    LOCAL_MEAN,
    LOCAL_VAR,
    LOCAL_VAR_LAST10,
    ZDA,
    ZDA_CELLS,
    ZDA_ROWS,
    Archive,
    fragment,
    gain_cell,
    paper_gap,
    seeds_of,
    slash,
    stat,
    try_gain,
)
from tools.results.fragments import Metric, cpu_name, fmt, markdown_table, summary_metric
from tools.results.seeds import (
    paper_text,
    seed_run,
    signed,
)

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
        method = row
        rows.append([name, *(_value(runs, m, d) for m, d in ours)])
        rows[-1] += [paper_text(archive.paper(p, method, runs)) for p in papers]
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
            method = row
            gaps = [
                paper_gap(archive, "global_acc", method, "fedavg", runs),
                paper_gap(archive, "class_acc_var", method, "fedavg", runs, "+g"),
            ]
            spread = "-" if variance is None else signed(variance.stat.mean, 0)
            cells.append(f"{gain_cell(accuracy)} / {spread} ({slash(gaps)})")
        rows.append(cells)
    header = ["paired gain over FedAvg, last 10 rounds: points / class var %^2 (paper: final round)"]
    return markdown_table([*header, *ZDA_CELLS], rows)


ZDA_RUN_STUDIES = {"": ZDA, " (Xeon rerun)": ("fedzda/cpu_drift/runs",)}
LOCAL_MEAN_LAST10 = summary_metric("local_acc_mean_last10")


def _zda_line(run: Run) -> list[str]:
    final = [f"{FINAL(run):.2f}", f"{CLASS_VAR(run):.1f}", f"{LOCAL_MEAN(run):.2f}", f"{LOCAL_VAR(run):.1f}"]
    return [" / ".join(final), f"{GLOBAL_LAST10(run):.2f} / {CLASS_VAR_LAST10(run):.1f}", cpu_name(run)]


@fragment("fedzda-runs")
def fedzda_runs(archive: Archive) -> str:
    """Every archived Fed-ZDA run, one line each: the final round's four numbers, the last 10 rounds' global
    accuracy and class variance, and its CPU."""
    rows = []
    for cell_name, setting in ZDA_CELLS.items():
        for row in ZDA_ROWS:
            for suffix, studies in ZDA_RUN_STUDIES.items():
                for run in sorted(archive.runs(studies, row, setting), key=lambda r: r.seed):
                    rows.append([cell_name, f"`{row}`{suffix}", str(run.seed), *_zda_line(run)])
    header = ["cell", "method", "seed", "final: global % / class var / local mean % / client var"]
    return markdown_table([*header, "last 10: global % / class var", "CPU"], rows)


def window_mean(run: Run, key: str, rounds: range = range(80, 101), scale: float = 100.0) -> float:
    """``key``'s mean over ``rounds`` of the run's per-round metrics (the rounds that logged it)."""
    values = [float(r[key]) for r in run.metrics() if r.get("round") in rounds and key in r]
    return scale * statistics.fmean(values)


ZDA_WINDOW_ROWS = {
    "FedAvg": "fedavg",
    "Fed-ZDAS batch 10": "fedzdas (server_batch_size=10)",
    "Fed-ZDAS batch 100": "fedzdas",
    "Fed-ZDAC": "fedzdac",
}


@fragment("fedzda-window-seed0")
def fedzda_window_seed0(archive: Archive) -> str:
    """Seed 0's global accuracy / class variance averaged over rounds 80-100 (the Fed-ZDA rounds)."""
    rows = []
    for name, row in ZDA_WINDOW_ROWS.items():
        cells = []
        for setting in ZDA_CELLS.values():
            run = seed_run(archive, (ZDA, row, setting), 0)
            if run is None:
                cells.append("-")
                continue
            acc, var = window_mean(run, "test/acc"), window_mean(run, "test/class_acc_var", scale=1e4)
            cells.append(f"{acc:.2f} / {var:.1f}")
        rows.append([name, *cells])
    return markdown_table(["seed 0, rounds 80-100", *ZDA_CELLS], rows)


@fragment("fedzda-seed1-unimodal")
def fedzda_seed1_unimodal(archive: Archive) -> str:
    """Seed 1 on both unimodal cells: the final round's four numbers, rounds 80-100's global / class var."""
    rows = []
    for name, row in (("FedAvg", "fedavg"), ("Fed-ZDAC", "fedzdac"), ("Fed-ZDAS", "fedzdas")):
        cells = []
        for cell_name in ("FMNIST unimodal", "MNIST unimodal"):
            run = seed_run(archive, (ZDA, row, ZDA_CELLS[cell_name]), 1)
            if run is None:
                cells += ["-", "-"]
                continue
            variance = window_mean(run, "test/class_acc_var", scale=1e4)
            window = f"{window_mean(run, 'test/acc'):.2f} / {variance:.1f}"
            cells += [_zda_line(run)[0], window]
        rows.append([name, *cells])
    header = [
        "seed 1",
        "FMNIST unimodal, final",
        "FMNIST, r80-100",
        "MNIST unimodal, final",
        "MNIST, r80-100",
    ]
    return markdown_table(header, rows)


def _level(found: Stat | None, variance: bool) -> str:
    """An accuracy with 2 decimals; a variance with 1 below 100 %^2, none above."""
    if found is None:
        return "-"
    return fmt(found, (1 if found.mean < 100 else 0) if variance else 2)


def _complete_cell(archive: Archive, setting: str, studies: tuple[str, ...] = ZDA) -> str:
    """One cell's five preset methods over their seeds: the final round's four numbers, the last 10 rounds'
    global accuracy and class variance (mean ± std each), and the paper's four means."""
    rows = []
    papers = ("global_acc", "class_acc_var", "local_acc_mean", "local_acc_var")
    methods = ("fedavg", "fedprox", "qffl (q=0.01)", "fedzdac", "fedzdas")
    cell_runs = [r for row in methods for r in archive.runs(studies, row, setting)]
    for row in methods:
        runs = archive.runs(studies, row, setting)
        final = [stat(runs, m) for m in (FINAL, CLASS_VAR, LOCAL_MEAN, LOCAL_VAR)]
        late = [stat(runs, m) for m in (GLOBAL_LAST10, CLASS_VAR_LAST10)]
        paper = [archive.paper(p, row, runs or cell_runs) for p in papers]  # the cell's paper row, run or not
        rows.append(
            [
                f"`{row}`",
                seeds_of(runs),
                " / ".join(_level(s, i % 2 == 1) for i, s in enumerate(final)),
                " / ".join(_level(s, i == 1) for i, s in enumerate(late)),
                " / ".join("-" if s is None else f"{s.mean:g}" for s in paper),
            ]
        )
    header = [
        "method",
        "seeds",
        "final: global / class var / local / client var",
        "last 10: global / class var",
    ]
    return markdown_table([*header, "paper (final)"], rows)


@fragment("fedzda-complete-fmnist-unimodal")
def fedzda_complete_fmnist(archive: Archive) -> str:
    return _complete_cell(archive, ZDA_CELLS["FMNIST unimodal"])


@fragment("fedzda-complete-mnist-unimodal")
def fedzda_complete_mnist(archive: Archive) -> str:
    return _complete_cell(archive, ZDA_CELLS["MNIST unimodal"])


ZDA_CIFAR10 = ("fedzda_cifar10_jpeg/runs",)
ZDA_CIFAR10_CELLS = {
    "shards": "CIFAR-10 (JPEG q75 copy) Shards(2) K=100",
    "multimodal": "CIFAR-10 (JPEG q75 copy) multimodal(2, clients) K=100",
}
"""Fed-ZDA's CIFAR-10 rows on the offline JPEG copy (issue #65 (b)): the unimodal and multimodal cells."""


@fragment("fedzda-cifar10-shards")
def fedzda_cifar10_shards(archive: Archive) -> str:
    return _complete_cell(archive, ZDA_CIFAR10_CELLS["shards"], ZDA_CIFAR10)


@fragment("fedzda-cifar10-multimodal")
def fedzda_cifar10_multimodal(archive: Archive) -> str:
    return _complete_cell(archive, ZDA_CIFAR10_CELLS["multimodal"], ZDA_CIFAR10)


@fragment("fedzda-qffl-q")
def fedzda_qffl_q(archive: Archive) -> str:
    """Seed 0's final-round global accuracy of q-FFL at q = 1 and q = 0.01 in every cell, the paper's q-FFL
    and our FedAvg beside."""
    rows = []
    for name, setting in ZDA_CELLS.items():
        runs = {row: seed_run(archive, (ZDA, row, setting), 0) for row in ("qffl", "qffl (q=0.01)", "fedavg")}
        ours = ["-" if run is None else f"{FINAL(run):.2f}" for run in runs.values()]
        base = [run for run in runs.values() if run is not None]
        rows.append([name, *ours[:2], paper_text(archive.paper("global_acc", "qffl", base)), ours[2]])
    return markdown_table(["cell", "q = 1", "q = 0.01", "paper q-FFL", "our FedAvg"], rows)


@fragment("fedzda-multimodal-seed0")
def fedzda_multimodal_seed0(archive: Archive) -> str:
    """Seed 0 on both multimodal cells: global % / class var / local mean % / client var; the paper beside."""
    rows = []
    papers = ("global_acc", "class_acc_var", "local_acc_mean", "local_acc_var")
    names = {
        "FedAvg": "fedavg",
        "FedProx": "fedprox",
        "q-FFL q = 0.01": "qffl (q=0.01)",
        "Fed-ZDAC": "fedzdac",
    }
    for name, row in names.items():
        cells = []
        for cell_name in ("MNIST multimodal", "FMNIST multimodal"):
            run = seed_run(archive, (ZDA, row, ZDA_CELLS[cell_name]), 0)
            if run is None:
                cells.append("-")
                continue
            ours = f"{FINAL(run):.2f} / {CLASS_VAR(run):.0f} / {LOCAL_MEAN(run):.2f} / {LOCAL_VAR(run):.0f}"
            paper = [archive.paper(p, row, [run]) for p in papers]
            cells.append(ours + " (" + " / ".join("-" if s is None else f"{s.mean:g}" for s in paper) + ")")
        rows.append([name, *cells])
    return markdown_table(["method", "MNIST", "FMNIST"], rows)
