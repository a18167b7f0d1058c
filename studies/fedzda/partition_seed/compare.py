"""Fashion-MNIST multimodal FedAvg: how much of the seed spread is the partition, how much the training.

Reads archived runs (``fedaug archive``): the preset's seeds 0 and 1 (each draws its own partition) and
seeds 1 and 2 with ``partition.seed: 0`` (seed 0's partition, other training randomness). Prints, per
run, the final round's global accuracy and class variance, their means over rounds 80-100 and the standard
sample standard deviation of the global accuracy over those rounds (its round-to-round swing), then mean ± std over the
three runs that share partition 0 (seed 0, and seeds 1 and 2 with the partition fixed). Writes
``compare.json`` beside this file.

Usage (from the repository root)::

    python studies/fedzda/partition_seed/compare.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from fedaug.engine.checkpoint import read_jsonl

HERE = Path(__file__).parent
ARCHIVE = HERE.parent / "runs" / "fashion_mnist-multimodal2_clients-K100" / "fedavg"
FIXED = HERE / "runs" / "fashion_mnist-multimodal2_clients-K100-pseed0" / "fedavg"
RUNS = {
    "partition 0, training seed 0": ARCHIVE / "seed0",
    "partition 0, training seed 1": FIXED / "seed1",
    "partition 0, training seed 2": FIXED / "seed2",
    "partition 1, training seed 1": ARCHIVE / "seed1",
}
WINDOW = 80  # rounds 80-100


def numbers(run_dir: Path) -> dict[str, float]:
    records = read_jsonl(run_dir / "metrics.jsonl")
    last, window = records[-1], [r for r in records if r["round"] >= WINDOW]
    accs = [100 * r["test/acc"] for r in window]
    return {
        "final_acc": 100 * last["test/acc"],
        "final_class_var": 1e4 * last["test/class_acc_var"],
        "window_acc": statistics.fmean(accs),
        "window_class_var": statistics.fmean(1e4 * r["test/class_acc_var"] for r in window),
        "window_acc_sd_over_rounds": statistics.stdev(accs),  # the sample std, as everywhere (docs/results.md)
    }


def main() -> None:
    table = {label: numbers(path) for label, path in RUNS.items()}
    shared = [table[label] for label in RUNS if label.startswith("partition 0")]
    spread = {
        key: [statistics.fmean(r[key] for r in shared), statistics.stdev(r[key] for r in shared)]
        for key in shared[0]
    }
    for label, row in table.items():
        print(f"{label:<30}" + "  ".join(f"{k} {v:.2f}" for k, v in row.items()))
    cells = "  ".join(f"{k} {m:.2f} ± {s:.2f}" for k, (m, s) in spread.items())
    print(f"partition 0, 3 training seeds: {cells}")
    out = {"runs": table, "partition0_mean_std": spread, "window_from_round": WINDOW}
    (HERE / "compare.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
