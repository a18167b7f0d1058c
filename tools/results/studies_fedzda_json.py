"""The generated blocks of studies/fedzda/README.md read from the study's JSON files (not from run dirs):
the class breakdown, the partition-seed comparison, the burn-in and CPU drift, the server-step probe and the
ZSDG quality measurements; the run-based blocks are in ``results_studies_fedzda.py``."""

from __future__ import annotations

import json
import statistics
from typing import Any

from fedaug.results.store import Stat
from tools.results.common import (
    STUDIES,
    Archive,
    fragment,
)
from tools.results.fragments import fmt, markdown_table

# --- studies/fedzda: the study's JSON files

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
        f"sample std of global % over r{window}-100",
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
