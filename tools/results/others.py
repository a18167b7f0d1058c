"""The baselines, Fed-ZDA and Fed-AugMix tables of docs/results.md."""

from __future__ import annotations

from fedaug.results.store import Run
from tools.results.common import (
    AUGMIX,
    AUGMIX_ROWS,
    BASELINE_ROWS,
    BASELINES,
    BEST,
    CLASS_VAR,
    FINAL,
    GLOBAL_LAST10,
    HAR_SPLITS,
    LAST10,
    LOCAL_MEAN,
    LOCAL_VAR,
    UCI_CPU,
    ZDA,
    ZDA_CELLS,
    ZDA_ROWS,
    Archive,
    cell,
    fragment,
    gain_cell,
    har,
    off_reference,
    paper_cell,
    paper_gap,
    seeds_of,
    stat,
    try_gain,
)
from tools.results.fragments import (
    Metric,
    canonical,
    fmt,
    markdown_table,
)

# --- baselines, Fed-ZDA, Fed-AugMix -----------------------------------------------------------------------


@fragment("baselines-seed0")
def baselines_seed0(archive: Archive) -> str:
    """Every baseline in every K = 75 cell, seed 0 (one run each), with the paper's best."""
    rows = []
    for row in BASELINE_ROWS:
        cells = [f"`{row}`"]
        for split in HAR_SPLITS:
            runs = [r for r in archive.runs(BASELINES, row, har(split)) if r.seed == 0]
            paper = archive.paper("best_acc", row, runs)
            cells.append(cell(runs, BEST, LAST10) + ("" if paper is None else f" ({paper_cell(paper)})"))
        rows.append(cells)
    runs_of = {
        f"`{row}` {split}": [r for r in archive.runs(BASELINES, row, har(split)) if r.seed == 0]
        for row in BASELINE_ROWS
        for split in HAR_SPLITS
    }
    return markdown_table(["method", *HAR_SPLITS], rows) + off_reference(runs_of)


@fragment("baselines-gains")
def baselines_gains(archive: Archive) -> str:
    """Each baseline archived with more than one seed: its gain over FedAvg paired by seed and CPU."""
    rows = []
    for row in BASELINE_ROWS[1:]:
        for split in HAR_SPLITS:
            runs = archive.runs(BASELINES, row, har(split))
            if len(canonical(runs)) < 2:
                continue
            base = archive.runs(BASELINES, "fedavg", har(split))
            best, last = (try_gain(runs, base, m) for m in (BEST, LAST10))
            gap = paper_gap(archive, "best_acc", row, "fedavg", runs)
            rows.append(
                [
                    f"`{row}`",
                    split,
                    seeds_of(runs),
                    gain_cell(best, count=True),
                    gain_cell(last, count=True),
                    gap,
                ]
            )
    flea = archive.runs(UCI_CPU, "flea", har("Dir(0.1)"))
    fedmix = archive.runs(BASELINES, "fedmix", har("Dir(0.1)"))
    best, last = (try_gain(fedmix, flea, m) for m in (BEST, LAST10))
    gap = paper_gap(archive, "best_acc", "fedmix", "flea", fedmix)
    rows.append(
        [
            "`fedmix` - `flea`",
            "Dir(0.1)",
            seeds_of(fedmix),
            gain_cell(best, count=True),
            gain_cell(last, count=True),
            gap,
        ]
    )
    header = ["method - FedAvg", "split", "seeds", "best, paired", "last-10, paired", "paper, best"]
    cells = {
        f"`{row}` {split}": archive.runs(BASELINES, row, har(split))
        for row in BASELINE_ROWS
        for split in HAR_SPLITS
        if len(canonical(archive.runs(BASELINES, row, har(split)))) > 1
    }
    return markdown_table(header, rows) + off_reference(cells)


def zda_level(archive: Archive, row: str, runs: list[Run], level: tuple[Metric, Metric, str, str]) -> str:
    """``accuracy ± std / variance`` of ``row``'s canonical runs and, in brackets, the paper's two means (none
    for ``qffl``, whose q the paper does not give); ``level``: the two metrics and the paper's two names."""
    acc, var = stat(runs, level[0]), stat(runs, level[1])
    paper = [archive.paper(m, row, runs) if row != "qffl" else None for m in level[2:]]
    text = "-" if acc is None or var is None else f"{fmt(acc)} / {var.mean:.1f}"
    if paper[0] is not None and paper[1] is not None:
        text += f" ({paper[0].mean:.2f} / {paper[1].mean:g})"
    return text


def zda_table(archive: Archive, level: tuple[Metric, Metric, str, str]) -> str:
    """Every archived row in every cell at one fairness level (:func:`zda_level`), with its seeds."""
    rows = []
    for row in ZDA_ROWS:
        cells = [zda_level(archive, row, archive.runs(ZDA, row, s), level) for s in ZDA_CELLS.values()]
        seeds = {seeds_of(archive.runs(ZDA, row, s)) for s in ZDA_CELLS.values()}
        rows.append([f"`{row}`", ", ".join(sorted(seeds)), *cells])
    runs_of = {
        f"`{row}` {name}": archive.runs(ZDA, row, setting)
        for row in ZDA_ROWS
        for name, setting in ZDA_CELLS.items()
    }
    return markdown_table(["method", "seeds", *ZDA_CELLS], rows) + off_reference(runs_of)


CLASS_LEVEL = (FINAL, CLASS_VAR, "global_acc", "class_acc_var")
CLIENT_LEVEL = (LOCAL_MEAN, LOCAL_VAR, "local_acc_mean", "local_acc_var")
"""The paper's Table 2 (global accuracy, variance across classes) and Table 1 (local accuracy, variance across
clients), final round."""


@fragment("fedzda")
def fedzda(archive: Archive) -> str:
    """The paper's Table 2 statistic: final round, global accuracy / class variance, every archived row."""
    return zda_table(archive, CLASS_LEVEL)


@fragment("fedzda-local")
def fedzda_local(archive: Archive) -> str:
    """The paper's Table 1 statistic: final round, local accuracy (mean over clients) / client variance."""
    return zda_table(archive, CLIENT_LEVEL)


@fragment("fedzda-gains")
def fedzda_gains(archive: Archive) -> str:
    """Fed-ZDAC/ZDAS minus FedAvg, paired: the paper's statistic (final round) first, last-10 beside."""
    rows = []
    for row in ("fedzdac", "fedzdas"):
        for name, setting in ZDA_CELLS.items():
            runs = archive.runs(ZDA, row, setting)
            base = archive.runs((*ZDA, "fedzda/cpu_drift/runs"), "fedavg", setting)
            final, last = (try_gain(runs, base, m) for m in (FINAL, GLOBAL_LAST10))
            gap = paper_gap(archive, "global_acc", row, "fedavg", runs)
            rows.append(
                [
                    f"`{row}`",
                    name,
                    seeds_of(runs),
                    gain_cell(final, count=True),
                    gap,
                    gain_cell(last, count=True),
                ]
            )
    header = [
        "method - FedAvg",
        "cell",
        "seeds",
        "final round, paired",
        "paper, final round",
        "last-10, paired",
    ]
    return markdown_table(header, rows)


@fragment("fedaugmix")
def fedaugmix(archive: Archive) -> str:
    """The Fed-AugMix rows whose per-round metrics are archived (seed 2), with the paper's best."""
    rows = []
    setting = "mnist Dir(0.5) K=100"
    for row in AUGMIX_ROWS:
        runs = archive.runs(AUGMIX, row, setting)
        rows.append(
            [
                f"`{row}`",
                seeds_of(runs),
                cell(runs, BEST),
                cell(runs, LAST10),
                paper_cell(archive.paper("best_acc", row, runs)),
            ]
        )
    cells = {f"`{row}`": archive.runs(AUGMIX, row, setting) for row in AUGMIX_ROWS}
    return markdown_table(["method", "seeds", "best %", "last-10 %", "paper, best %"], rows) + off_reference(
        cells
    )
