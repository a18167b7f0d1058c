"""The generated blocks of studies/fedzda/README.md: the seed-0 tables of the first sessions, the grid's
tables and paired gains, the per-session tables (rounds 80-100, seed 1, the partition seed, the class
breakdown, the CPU drift) and every archived run, from the archives and the study's JSON files."""

from __future__ import annotations

import json
import statistics
from typing import Any

from results_common import (
    CLASS_VAR,
    CLASS_VAR_LAST10,
    FINAL,
    GLOBAL_LAST10,
    LOCAL_MEAN,
    LOCAL_VAR,
    LOCAL_VAR_LAST10,
    STUDIES,
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
from results_seeds import (
    paper_text,
    seed_run,
    signed,
)

from fedaug.results.fragments import Metric, cpu_name, fmt, markdown_table, summary_metric
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


BREAKDOWN_NAMES = {
    "fedavg": "FedAvg",
    "fedprox": "FedProx",
    "method.q=0.01/qffl": "q-FFL (q = 0.01)",
    "fedzdac": "Fed-ZDAC",
    "fedzdas": "Fed-ZDAS batch 10",
    "method.server_batch_size=100/fedzdas": "Fed-ZDAS batch 100",
}
"""``class_breakdown.py``'s runs by their run dir (Fed-ZDAS's server batch was 10 by default then)."""


@fragment("fedzda-class-breakdown")
def fedzda_class_breakdown(archive: Archive) -> str:
    """``class_breakdown_fmnist_multimodal_seed0.json``: the class variance with and without the dropped
    class, final round / mean over its window."""
    data = json.loads((STUDIES / "fedzda" / "class_breakdown_fmnist_multimodal_seed0.json").read_text())
    rows = []
    for run in data["runs"]:
        parts = run["run_dir"].split("/")
        key = "/".join(p for p in (parts[2] if parts[2].startswith("method.") else "", parts[-2]) if p)
        final, window = run["final"], run["window_mean"]
        rows.append(
            [BREAKDOWN_NAMES.get(key, key)]
            + [
                f"{final[k]:.{d}f} / {window[k]:.{d}f}"
                for k, d in (
                    ("class_var", 0),
                    ("class_var_without", 0),
                    ("dropped_acc", 1),
                    ("others_mean", 1),
                )
            ]
        )
    header = ["", "all 10 classes", "without Shirt", "Shirt's accuracy (final / mean)"]
    return markdown_table([*header, "the other nine, mean accuracy (final / mean)"], rows)


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


@fragment("fedzda-partition-seed")
def fedzda_partition_seed(archive: Archive) -> str:
    """``partition_seed/compare.json``: FedAvg on FMNIST multimodal, one partition and several training
    seeds, final round and the mean over rounds 80-100."""
    data = json.loads((STUDIES / "fedzda" / "partition_seed" / "compare.json").read_text())
    keys = ("final_acc", "final_class_var", "window_acc", "window_class_var")
    rows = []
    for name, run in data["runs"].items():
        digits = (2, 0, 2, 0)
        rows.append([name, *(f"{run[k]:.{d}f}" for k, d in zip(keys, digits, strict=True))])
        rows[-1].append(f"{run['window_acc_sd_over_rounds']:.2f}")
    spread = data["partition0_mean_std"]
    cells = [fmt(Stat(*spread[k], 3), d) for k, d in zip(keys, (2, 0, 2, 0), strict=True)]
    rows.append(["partition 0, 3 training seeds", *cells, ""])
    window = data["window_from_round"]
    header = ["FedAvg, FMNIST multimodal", "global % final", "class var final"]
    header += [
        f"global % mean r{window}-100",
        f"class var mean r{window}-100",
        f"sd of global % over r{window}-100",
    ]
    return markdown_table(header, rows)


def _drift_table(path: str, where: str) -> str:
    """A drift JSON (``burnin_drift.py`` / ``cpu_drift.py``): per run that differs, the CPUs, the first
    differing round and the per-round difference of global accuracy (mean ± std, largest)."""
    data = json.loads((STUDIES / "fedzda" / path).read_text())
    rows = []
    for run, entry in data.items():
        if entry.get("first_different_round") is None:
            continue
        first, second = (
            entry.get("fedavg_cpu", entry.get("first_cpu")),
            entry.get("cpu", entry.get("second_cpu")),
        )
        cpus = f"{first} -> {second}"
        change = f"{entry['mean_points']:+.3f} ± {entry['std_points']:.3f}"
        change += f" (largest {entry['largest_points']:+.2f})"
        rows.append([run, cpus.replace("?", "not recorded"), str(entry["first_different_round"]), change])
    header = [
        "run",
        "CPU (first -> second)",
        "first differing round",
        f"per-round difference, {where}, points",
    ]
    return markdown_table(header, rows)


@fragment("fedzda-burnin-drift")
def fedzda_burnin_drift(archive: Archive) -> str:
    """``burnin_drift.json``: how many ZDA runs repeat their FedAvg run's rounds 1-79; those that do not."""
    data = json.loads((STUDIES / "fedzda" / "burnin_drift.json").read_text())
    same = sum(entry.get("first_different_round") is None for entry in data.values())
    return (
        f"{same} of the {len(data)} archived ZDA runs repeat their FedAvg run's rounds 1-79 bit for bit; the "
        f"others:\n\n" + _drift_table("burnin_drift.json", "rounds 61-79")
    )


@fragment("fedzda-cpu-drift")
def fedzda_cpu_drift(archive: Archive) -> str:
    return _drift_table("cpu_drift/cpu_drift.json", "rounds 1-100")


def _level(found: Stat | None, variance: bool) -> str:
    """An accuracy with 2 decimals; a variance with 1 below 100 %^2, none above."""
    if found is None:
        return "-"
    return fmt(found, (1 if found.mean < 100 else 0) if variance else 2)


def _complete_cell(archive: Archive, setting: str) -> str:
    """One cell's five preset methods over their seeds: the final round's four numbers, the last 10 rounds'
    global accuracy and class variance (mean ± std each), and the paper's four means."""
    rows = []
    papers = ("global_acc", "class_acc_var", "local_acc_mean", "local_acc_var")
    for row in ("fedavg", "fedprox", "qffl (q=0.01)", "fedzdac", "fedzdas"):
        runs = archive.runs(ZDA, row, setting)
        final = [stat(runs, m) for m in (FINAL, CLASS_VAR, LOCAL_MEAN, LOCAL_VAR)]
        late = [stat(runs, m) for m in (GLOBAL_LAST10, CLASS_VAR_LAST10)]
        paper = [archive.paper(p, row, runs) for p in papers]
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


PROBE_FILES = {
    "MNIST unimodal": "mnist_shards2",
    "MNIST multimodal": "mnist_multimodal2_clients",
    "FMNIST unimodal": "fashion_mnist_shards2",
    "FMNIST multimodal": "fashion_mnist_multimodal2_clients",
}
PROBE_VARIANTS = {
    "fedavg": "none (= FedAvg)",
    "run": "default: batch 10, lr 0.02 (100 steps)",
    "server_batch_size=100": "batch 100 (10 steps)",
    "server_lr=0.002": "lr 0.002 (100 steps)",
    "server_lr=0.005": "lr 0.005",
    "server_batch_size=50": "batch 50",
    "server_epochs=5,server_batch_size=100": "5 epochs at batch 100 (50 steps)",
    "server_batchnorm=frozen": "BN frozen (eval mode), lr 0.02",
    "server_batchnorm=frozen,server_lr=0.002": "BN frozen, lr 0.002",
    "keep_bn_stats=true": "default, then the aggregated BN statistics put back",
    "server_batch_size=100,keep_bn_stats=true": "batch 100, then the aggregated BN statistics put back",
    "server_lr=0.005,keep_bn_stats=true": "lr 0.005, then the aggregated BN statistics put back",
}
"""``zdas_server_probe.py``'s variants in words, in the table's order."""


@fragment("fedzda-server-probe")
def fedzda_server_probe(archive: Archive) -> str:
    """``zdas_server_probe/*.json``: round 80 replayed with each server step, global % / class variance."""
    folder = STUDIES / "fedzda" / "zdas_server_probe"
    probes = {}
    for name, stem in PROBE_FILES.items():
        records = json.loads((folder / f"{stem}_seed0_round80.json").read_text())["rows"]
        probes[name] = {r["variant"]: r for r in records}
    rows = []
    for variant, label in PROBE_VARIANTS.items():
        cells = [
            "-"
            if variant not in probe
            else f"{probe[variant]['acc']:.2f} / {probe[variant]['class_var']:.1f}"
            for probe in probes.values()
        ]
        rows.append([label, *cells])
    return markdown_table(["server step", *PROBE_FILES], rows)


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


def _zsdg(name: str) -> dict[str, Any]:
    return dict(json.loads((STUDIES / "fedzda" / name).read_text()))


def _noise_classes(counts: list[int]) -> str:
    """The oracle's predictions on noise: the classes it picks, most picked first."""
    picked = sorted(((n, c) for c, n in enumerate(counts) if n), reverse=True)
    return ", ".join(f"{c} ({n} of {sum(counts)})" for n, c in picked)


@fragment("fedzda-zsdg-quality")
def fedzda_zsdg_quality(archive: Archive) -> str:
    """``zsdg_quality.json``: the oracle and the source model on the ZSDG samples, per class and mean."""
    data = _zsdg("zsdg_quality.json")
    per = data["per_class"]

    def percent(value: float, digits: int = 1) -> str:
        return f"{round(100 * value, digits):g}"

    def classes(key: str) -> str:
        return ", ".join(percent(c[key]) for c in per)

    source_on_synthetic = statistics.fmean(c["source_acc_on_synthetic"] for c in per)
    rows = [
        ["oracle accuracy on the ZSDG samples", f"{percent(data['oracle_acc_on_synthetic_mean'])}%"],
        ["source model's accuracy on them", f"{percent(source_on_synthetic)}%"],
        ["source model's test accuracy (real images)", f"{percent(data['source_test_acc'])}%"],
        [
            "control: oracle on Gaussian noise (ZSDG's start)",
            f"{percent(data['oracle_acc_on_noise_mean'], 2)}%",
        ],
    ]
    rows[0].append(classes("oracle_acc_on_synthetic"))
    rows[1].append(classes("source_acc_on_synthetic"))
    rows[2].append(classes("source_test_acc"))
    rows[3].append("predicts class " + _noise_classes(data["oracle_pred_on_noise"]))
    models = f"Source model: {percent(data['source_test_acc'])}% test accuracy; oracle: "
    models += f"{percent(data['oracle_test_acc'])}%.\n\n"
    return models + markdown_table(["", "mean over classes", "per class 0-9"], rows)


ZSDG_PAPER_ORACLE = {"MNIST": 99.06, "Fashion-MNIST": 89.79}
"""The paper's oracles' test accuracy (Section 4.4)."""


@fragment("fedzda-zsdg-multimodal")
def fedzda_zsdg_multimodal(archive: Archive) -> str:
    """``zsdg_quality_multimodal_*.json``: the oracle on the ZSDG samples of the multimodal FedAvg models."""
    rows = []
    for name, stem in (("MNIST", "mnist"), ("Fashion-MNIST", "fashion_mnist")):
        data = _zsdg(f"zsdg_quality_multimodal_{stem}.json")
        synthetic = [100 * c["oracle_acc_on_synthetic"] for c in data["per_class"]]
        rows.append(
            [
                name,
                f"{100 * data['oracle_test_acc']:.2f}% (paper {ZSDG_PAPER_ORACLE[name]})",
                f"{100 * data['source_test_acc']:.2f}%",
                f"{100 * data['oracle_acc_on_synthetic_mean']:.1f}% "
                f"({min(synthetic):.1f}-{max(synthetic):.0f} per class)",
                f"{100 * data['oracle_acc_on_noise_mean']:.1f}%",
            ]
        )
    header = [
        "dataset",
        "oracle test acc",
        "source model test acc",
        "oracle on ZSDG samples (mean over classes)",
    ]
    return markdown_table([*header, "oracle on Gaussian noise (control)"], rows)


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
