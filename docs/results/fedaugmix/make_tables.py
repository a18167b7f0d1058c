"""Rebuilds the tables of docs/results/fedaugmix/ from the run directories (see README.md there).

    python docs/results/fedaugmix/make_tables.py

* attack/: the ``fedaug attack invert`` result lines of the listed out dirs, merged, and the table
  rebuilt with the CLI's own :func:`fedaug.attacks.invert_report.write_table`;
* accuracy.md / accuracy.json: best and last global test accuracy and time per round of the MNIST runs.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from fedaug.attacks.invert_report import write_table

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
ATTACK_DIRS = [
    "runs/attack_invert/lenet5_probe1000",  # LeNet-5, untrained, severity 0
    "runs/attack_invert/lenet5_grid/untrained",
    "runs/attack_invert/lenet5_grid/converged",
    "runs/attack_invert/lenet5_grid/converged_lsoff",
    "runs/attack_invert/mlp_grid",  # MLP, untrained, severities 0, 3, 10
]
RUNS = ROOT / "runs/fedaugmix_mnist_cpu/mnist-dirichlet0.5-K100"
METHODS = ["fedavg", "fedaugmix", "fedprox", "fedprox_augmix"]
PAPER = {"fedavg": 95.63, "fedaugmix": 96.60, "fedprox": 95.88, "fedprox_augmix": 97.34}


def _key(row: dict[str, object]) -> tuple[object, ...]:
    names = ("model", "stage", "label", "batch", "seed", "iterations", "batch_size", "local_epochs", "tv")
    return tuple(row.get(k) for k in names)


def merge_attack() -> None:
    out = HERE / "attack"
    out.mkdir(exist_ok=True)
    for name in ("results.jsonl", "floors.jsonl"):
        lines: list[str] = []
        for d in ATTACK_DIRS:
            path = ROOT / d / name
            if path.exists():
                lines += [line for line in path.read_text().splitlines() if line.strip()]
        # one line per attack: a repeated attack (same setting, images and seed) is kept once
        unique = {_key(json.loads(line)): line for line in reversed(lines)}
        (out / name).write_text("".join(line + "\n" for line in reversed(unique.values())))
    write_table(out)


def accuracy() -> None:
    rows = []
    for method in METHODS:
        run = RUNS / method / "seed0"
        metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        timings = [json.loads(x) for x in (run / "timings.jsonl").read_text().splitlines()]
        acc = [m["test/acc"] * 100 for m in metrics]
        rows.append(
            {
                "method": method,
                "rounds": len(acc),
                "best_acc": max(acc),
                "best_round": acc.index(max(acc)) + 1,
                "last_acc": acc[-1],
                "paper": PAPER[method],
                "round_s_median": statistics.median(t["round_time"] for t in timings),
                "train_s_median": statistics.median(t["train"] for t in timings),
                "total_s": sum(t["round_time"] for t in timings),
            }
        )
    (HERE / "accuracy.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        "| method | paper (%) | ours best (%) [round] | ours last (%) | round time, median (s) "
        "| of which client training (s) | total (min) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['paper']:.2f} | {r['best_acc']:.2f} [{r['best_round']}] "
            f"| {r['last_acc']:.2f} | {r['round_s_median']:.1f} | {r['train_s_median']:.1f} "
            f"| {r['total_s'] / 60:.1f} |"
        )
    (HERE / "accuracy.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    merge_attack()
    accuracy()
