"""The generated blocks of the FLea study READMEs (``flea_table1_har``, ``flea_objective_har``,
``flea_k150_har``, ``flea_fsdd``, ``uci_har_*``): FedAvg against ``flea`` per setting and device class,
through the helpers of ``results_common`` and ``results_seeds``."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence

from fedaug.results.reference import lookup
from fedaug.results.store import Stat
from tools.results.common import (
    BEST,
    FLEA_ROWS,
    FSDD,
    FSDD_SPLITS,
    GPU_GRIDS,
    K75,
    K150,
    K150_SPLITS,
    LAST10,
    STUDIES,
    UCI_CPU,
    Archive,
    cell,
    fragment,
    gain_cell,
    har,
    label,
    paper_cell,
    seeds_of,
    split_names,
    try_gain,
)
from tools.results.fragments import device_class, markdown_table
from tools.results.seeds import (
    best_last,
    gains_by_seed,
    on,
    runs_table,
    seed_run,
    seeds_gain_table,
    variants_table,
)


def _device(archive: Archive, studies: Sequence[str], settings: Sequence[str]) -> str:
    """The device class of the studies' runs (one per table: classes are never mixed)."""
    runs = [r for x in settings for r in archive.runs(studies, "fedavg", x)]
    return device_class(runs[0]) if runs else "CPU"


def flea_grid(
    archive: Archive,
    studies: Sequence[str],
    settings: Sequence[str],
    other: tuple[str, Sequence[str]] | None = None,
) -> str:
    """FedAvg and ``flea`` (best / last-10, mean ± std over the canonical seeds of one device class), the
    paired gains with the seeds that gain, ``other``'s paired last-10 gain (label, studies) for comparison,
    and the paper's best."""
    device = _device(archive, studies, settings)
    base = {x: archive.runs(studies, "fedavg", x) for x in settings}
    flea = {x: archive.runs(studies, "flea", x) for x in settings}
    rows = [
        [
            "seeds (FedAvg / `flea`)",
            *(f"{seeds_of(base[x], device)} / {seeds_of(flea[x], device)}" for x in settings),
        ],
        ["FedAvg", *(cell(base[x], BEST, LAST10, device=device) for x in settings)],
        ["`flea`", *(cell(flea[x], BEST, LAST10, device=device) for x in settings)],
    ]
    for metric, what in ((LAST10, "last-10"), (BEST, "best")):
        gains = [try_gain(flea[x], base[x], metric, device) for x in settings]
        rows.append([f"gain, {what}, paired (seeds that gain)", *(gain_cell(g, count=True) for g in gains)])
    if other is not None:
        name, where = other
        there = _device(archive, where, settings)
        gains = [
            try_gain(archive.runs(where, "flea", x), archive.runs(where, "fedavg", x), LAST10, there)
            for x in settings
        ]
        rows.append([f"{name}, last-10 gain", *(gain_cell(g) for g in gains)])
    papers = [
        " / ".join(paper_cell(archive.paper("best_acc", m, base[x] or flea[x])) for m in ("fedavg", "flea"))
        for x in settings
    ]
    if any(paper != "- / -" for paper in papers):
        rows.append(["paper FedAvg / FLea (best, 5 seeds)", *papers])
    columns = [
        f"{name} K={x.rsplit('=', 1)[1]}" for name, x in zip(split_names(settings), settings, strict=True)
    ]
    return markdown_table(["", *columns], rows)


@fragment("table1-cpu-k75")
def table1_cpu_k75(archive: Archive) -> str:
    return flea_grid(archive, UCI_CPU, K75)


@fragment("table1-h100-grid2")
def table1_h100_grid2(archive: Archive) -> str:
    grid1 = ("the first H100 grid", (GPU_GRIDS["H100, grid 1"],))
    return flea_grid(archive, (GPU_GRIDS["H100, grid 2"],), [*K75, *K150], grid1)


@fragment("table1-h100-grid1")
def table1_h100_grid1(archive: Archive) -> str:
    return flea_grid(archive, (GPU_GRIDS["H100, grid 1"],), [*K75, *K150], ("the same on the CPU", UCI_CPU))


@fragment("table1-h200")
def table1_h200(archive: Archive) -> str:
    return flea_grid(archive, (GPU_GRIDS["H200"],), [*K75, *K150])


@fragment("table1-cpu-dir03-seeds")
def table1_cpu_dir03_seeds(archive: Archive) -> str:
    study = ("flea_table1_har/cpu_dir03/runs",)
    rows = {name: (study, row, har("Dir(0.3)")) for name, row in (("FedAvg", "fedavg"), ("`flea`", "flea"))}
    return runs_table(archive, rows, (0, 1, 2))


OBJECTIVE = ("flea_objective_har/runs",)
OBJECTIVE_LABELS = (
    "FedAvg",
    "`flea_eq6` (Eq. 6)",
    "+ local CE",
    "+ local CE + dCor, official schedule (`flea`)",
    "`flea_official`",
)
"""The study README's names of :data:`FLEA_ROWS`' runs: each row adds one change to the one above it."""
OBJECTIVE_ROWS = dict(zip(OBJECTIVE_LABELS, FLEA_ROWS.values(), strict=True))


def _objective(archive: Archive, split: str) -> str:
    rows = {name: (OBJECTIVE, row, har(split)) for name, row in OBJECTIVE_ROWS.items()}
    return variants_table(archive, rows, rows["FedAvg"], (0, 1, 2), f"{split}, K = 75, seeds 0 / 1 / 2")


@fragment("objective-qua2")
def objective_qua2(archive: Archive) -> str:
    return _objective(archive, "Qua(2)")


@fragment("objective-dir01")
def objective_dir01(archive: Archive) -> str:
    return _objective(archive, "Dir(0.1)")


FSDD_SETTINGS = [f"fsdd {s} K={k}" for k in (27, 54) for s in FSDD_SPLITS]


@fragment("fsdd-grid")
def fsdd_grid(archive: Archive) -> str:
    return flea_grid(archive, FSDD, FSDD_SETTINGS)


@fragment("fsdd-seeds")
def fsdd_seeds(archive: Archive) -> str:
    """Each seed of each setting: FedAvg's and ``flea``'s best / last-10 and the last-10 gain."""
    rows = []
    for setting in FSDD_SETTINGS:
        base, flea = ((FSDD, m, setting) for m in ("fedavg", "flea"))
        gain = try_gain(on(archive, flea, (0, 1, 2)), on(archive, base, (0, 1, 2)), LAST10)
        for seed in (0, 1, 2):
            shown = f"{gain.values[seed]:+.2f}" if gain is not None and seed in gain.values else "-"
            where = " K=".join(setting.split(" ", 1)[1].split(" K=")) if seed == 0 else ""
            cells = [best_last(seed_run(archive, spec, seed)) for spec in (base, flea)]
            rows.append([where, str(seed), *cells, shown])
    return markdown_table(["setting", "seed", "FedAvg", "`flea`", "gain, last-10"], rows)


K150_ROWS = {"FedAvg": "fedavg", "`flea`": "flea", "FedMix": "fedmix"}


@fragment("k150-seeds")
def k150_seeds(archive: Archive) -> str:
    """Each seed of FedAvg, ``flea`` and FedMix at K = 150 (CPU), best (round) / last-10."""
    rows = {
        f"{name}, {split}": (UCI_CPU, row, setting)
        for split, setting in K150_SPLITS.items()
        for name, row in K150_ROWS.items()
        if archive.runs(UCI_CPU, row, setting)
    }
    return runs_table(archive, rows, (0, 1, 2))


@fragment("k150-seed-gains")
def k150_seed_gains(archive: Archive) -> str:
    """``flea`` and FedMix against FedAvg, and FedMix against ``flea``, seed by seed at K = 150."""
    rows = {}
    for split, setting in K150_SPLITS.items():
        avg, flea, mix = ((UCI_CPU, row, setting) for row in ("fedavg", "flea", "fedmix"))
        rows[f"`flea` - FedAvg, {split}"] = (flea, avg)
        if archive.runs(*mix):
            rows[f"FedMix - FedAvg, {split}"] = (mix, avg)
            rows[f"FedMix - `flea`, {split}"] = (mix, flea)
    return gains_by_seed(archive, rows, (0, 1, 2))


@fragment("k150-h200-seeds")
def k150_h200_seeds(archive: Archive) -> str:
    """The H200 grid's finished K = 150 runs, seeds 0-1, best (round) / last-10."""
    study = (GPU_GRIDS["H200"],)
    rows = {
        f"{name}, {split}": (study, row, setting)
        for name, row in K150_ROWS.items()
        for split, setting in K150_SPLITS.items()
        if archive.runs(study, row, setting)
    }
    runs = [r for spec in rows.values() for r in archive.runs(*spec)]
    return runs_table(archive, rows, (0, 1), device_class(runs[0]) if runs else "CPU")


# --- uci_har_k75 / uci_har_qua2_k75: their runs are gone; report.csv (fedaug report) is what is archived


def report_csv(study: str) -> dict[tuple[str, str, str], dict[str, str]]:
    """``studies/<study>/report.csv`` by (metric, method, the setting's first part, e.g. ``uci_har Qua(2)
    K=75``)."""
    with (STUDIES / study / "report.csv").open(newline="") as handle:
        rows = csv.DictReader(handle)
        return {(r["metric"], r["method"].split(" ")[0], r["setting"].split(",")[0]): r for r in rows}


def _csv_pair(report: dict[tuple[str, str, str], dict[str, str]], method: str, setting: str) -> str:
    """``best / last-10`` of one method in one setting (``-`` where the report has no row)."""
    rows = [report.get((m, method, setting)) for m in ("best_acc", "last10_acc")]
    return "-" if None in rows else " / ".join(f"{float(r['mean']):.2f}" for r in rows if r is not None)


def _csv_paper(report: dict[tuple[str, str, str], dict[str, str]], method: str, setting: str) -> str:
    row = report.get(("best_acc", method, setting))
    return "-" if row is None or not row["paper_mean"] else f"{row['paper_mean']} ± {row['paper_std']}"


@fragment("uci-har-k75")
def uci_har_k75(archive: Archive) -> str:
    """FedAvg, the paper-definition FLea and ``flea_official``, seed 0, from ``report.csv`` and (Dir(0.1)'s
    ``flea_official``, finished after the report) ``flea_official_dir0.1/summary.json``."""
    report = report_csv("uci_har_k75")
    late = json.loads((STUDIES / "uci_har_k75" / "flea_official_dir0.1" / "summary.json").read_text())
    rows = []
    for setting in K75:
        official = _csv_pair(report, "flea_official", setting)
        if setting == har("Dir(0.1)"):
            official = f"{100 * late['best_acc']:.2f} / {100 * late['last10_acc']:.2f}"
        rows.append(
            [
                setting.split(" ")[1],
                _csv_pair(report, "fedavg", setting),
                _csv_paper(report, "fedavg", setting),
                _csv_pair(report, "flea", setting),
                official if official != "-" else "not run",
                _csv_paper(report, "flea", setting),
            ]
        )
    header = [
        "setting",
        "FedAvg ours",
        "FedAvg paper",
        "FLea (paper definition) ours",
        "`flea_official` ours",
    ]
    return markdown_table([*header, "FLea paper"], rows)


@fragment("uci-har-qua2-k75")
def uci_har_qua2_k75(archive: Archive) -> str:
    """FedAvg and the paper-definition FLea, Qua(2), seed 0, from ``report.csv``."""
    report = report_csv("uci_har_qua2_k75")
    setting = har("Qua(2)")
    rows = [
        [name, _csv_pair(report, method, setting), _csv_paper(report, method, setting)]
        for name, method in (("FedAvg", "fedavg"), ("FLea (paper defaults)", "flea"))
    ]
    return markdown_table(["method", "best / last-10 %", "paper best %"], rows)


HPARAMS = ("flea_hparams_har/runs",)


@fragment("flea-hparams")
def flea_hparams(archive: Archive) -> str:
    """Every archived configuration of ``flea_hparams_har`` against FedAvg, by seed."""
    setting = har("Qua(2)")
    labels = sorted(
        {label(r) for r in archive.study(HPARAMS[0])} - {"fedavg"}, key=lambda x: (x != "flea", x)
    )
    rows = {"FedAvg": (HPARAMS, "fedavg", setting)}
    rows |= {f"`{row}`": (HPARAMS, row, setting) for row in labels}
    seeds = sorted({r.seed for r in archive.study(HPARAMS[0])})
    return seeds_gain_table(archive, rows, rows["FedAvg"], seeds)


STANDIN = ("flea_cifar10_standin/runs",)
STANDIN_PILOT = {
    model: f"CIFAR-10 (JPEG q75 copy) Qua(3) K=500, {model} (stand-in model for MobileNetV2)"
    for model in ("bn_cnn_cifar", "lenet5")
}
"""The pilot's two candidate stand-ins and their setting labels (seed 0, Qua(3), K = 500)."""


@fragment("standin-pilot")
def standin_pilot(archive: Archive) -> str:
    """The stand-in pilot (issue #65 (a)): per candidate model, FedAvg's and ``flea``'s best / last-10 on seed
    0, FLea's gain over FedAvg, beside the paper's MobileNetV2 row of the same setting (looked up as if the
    run were MobileNetV2's: the runs themselves have no paper number)."""
    rows = []
    for model, setting in STANDIN_PILOT.items():
        # The pilot chose the model on seed 0; the grid's later seeds of the same setting stay out of it.
        base, flea = (
            [r for r in archive.runs(STANDIN, m, setting) if r.seed == 0] for m in ("fedavg", "flea")
        )
        gains = [gain_cell(try_gain(flea, base, metric)) for metric in (BEST, LAST10)]
        rows.append([f"`{model}`", cell(base, BEST, LAST10), cell(flea, BEST, LAST10), *gains])
    runs = [r for setting in STANDIN_PILOT.values() for r in archive.runs(STANDIN, "fedavg", setting)]
    if runs:
        as_paper = {**runs[0].config, "model.name": "mobilenet_v2_cifar"}
        paper = [lookup(archive.reference, "best_acc", m, as_paper) for m in ("fedavg", "flea")]
        stats = [found[0] if found is not None else None for found in paper]
        gain = f"{stats[1].mean - stats[0].mean:+.2f}" if stats[0] and stats[1] else "-"
        rows.append(["paper, MobileNetV2 (best, 5 seeds)", *(paper_cell(s) for s in stats), gain, "-"])
    header = ["model", "FedAvg best / last-10", "`flea` best / last-10", "gain, best", "gain, last-10"]
    return markdown_table(header, rows)


STANDIN_SPLITS = {
    split: f"CIFAR-10 (JPEG q75 copy) {split} K=500, lenet5 (stand-in model for MobileNetV2)"
    for split in ("Qua(3)", "Dir(0.5)", "Dir(0.1)")
}
"""The stand-in grid's settings (issue #65 (a)): the paper's three CIFAR-10 splits, K = 500, LeNet-5."""


def standin_papers(archive: Archive, method: str) -> list[Stat | None]:
    """The paper's MobileNetV2 best accuracy of ``method`` on each stand-in split (looked up as if the runs
    were MobileNetV2's: the stand-in runs themselves have no paper number)."""
    found = []
    for setting in STANDIN_SPLITS.values():
        runs = archive.runs(STANDIN, "fedavg", setting) or archive.runs(STANDIN, "flea", setting)
        hit = (
            lookup(
                archive.reference, "best_acc", method, {**runs[0].config, "model.name": "mobilenet_v2_cifar"}
            )
            if runs
            else None
        )
        found.append(hit[0] if hit is not None else None)
    return found


@fragment("standin-grid")
def standin_grid(archive: Archive) -> str:
    """FedAvg and ``flea`` on the stand-in grid (best / last-10, mean ± std over seeds), the paired gains
    with the seeds that gain, and the paper's MobileNetV2 best beside (its model, not ours)."""
    base = {x: archive.runs(STANDIN, "fedavg", x) for x in STANDIN_SPLITS.values()}
    flea = {x: archive.runs(STANDIN, "flea", x) for x in STANDIN_SPLITS.values()}
    rows = [
        ["seeds (FedAvg / `flea`)", *(f"{seeds_of(base[x])} / {seeds_of(flea[x])}" for x in base)],
        ["FedAvg", *(cell(base[x], BEST, LAST10) for x in base)],
        ["`flea`", *(cell(flea[x], BEST, LAST10) for x in base)],
    ]
    for metric, what in ((LAST10, "last-10"), (BEST, "best")):
        gains = [try_gain(flea[x], base[x], metric) for x in base]
        rows.append([f"gain, {what}, paired (seeds that gain)", *(gain_cell(g, count=True) for g in gains)])
    paper = [standin_papers(archive, m) for m in ("fedavg", "flea")]
    rows.append(
        [
            "paper, MobileNetV2: FedAvg / FLea (best, 5 seeds)",
            *(f"{paper_cell(a)} / {paper_cell(b)}" for a, b in zip(*paper, strict=True)),
        ]
    )
    return markdown_table(["", *(f"{split} K=500" for split in STANDIN_SPLITS)], rows)
