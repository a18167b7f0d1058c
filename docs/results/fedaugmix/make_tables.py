"""Rebuilds the tables of docs/results/fedaugmix/ from the run directories (see README.md there).

    python docs/results/fedaugmix/make_tables.py              # both
    python docs/results/fedaugmix/make_tables.py accuracy     # or: attack

* attack/: the ``fedaug attack invert`` result lines of the listed out dirs, merged, and the table
  rebuilt with the CLI's own :func:`fedaug.attacks.invert_report.write_table` (skipped, keeping the
  committed files, when none of the out dirs exists: run dirs do not survive a machine change);
* accuracy.md / accuracy.json: per run of the Table III sweep (``runs/fedaugmix_table3_mnist``, finished
  or not), best, last-10 and final global test accuracy and the time per round. The mean +- std over seeds
  beside the paper is ``fedaug report``'s (report.md, README.md).
"""

from __future__ import annotations

import json
import statistics
import sys
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
RUNS = ROOT / "runs/fedaugmix_table3_mnist/mnist-dirichlet0.5-K100"
METHODS = ["fedavg", "fedaugmix", "fedprox", "fedprox_augmix"]
PAPER = {"fedavg": 95.63, "fedaugmix": 96.60, "fedprox": 95.88, "fedprox_augmix": 97.34}


def _key(row: dict[str, object]) -> tuple[object, ...]:
    names = ("model", "stage", "label", "batch", "seed", "iterations", "batch_size", "local_epochs", "tv")
    return tuple(row.get(k) for k in names)


def merge_attack() -> None:
    out = HERE / "attack"
    if not any((ROOT / d).is_dir() for d in ATTACK_DIRS):
        print(f"no attack out dirs under {ROOT / 'runs/attack_invert'}: {out} left as committed")
        return
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
        for run in sorted((RUNS / method).glob("seed*"), key=lambda p: int(p.name[4:])):
            metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            timings = [json.loads(x) for x in (run / "timings.jsonl").read_text().splitlines()]
            acc = [m["test/acc"] * 100 for m in metrics]
            rows.append(
                {
                    "method": method,
                    "seed": int(run.name[4:]),
                    "rounds": len(acc),
                    "finished": (run / "summary.json").exists(),
                    "best_acc": round(max(acc), 2),
                    "best_round": acc.index(max(acc)) + 1,
                    "last10_acc": round(statistics.mean(acc[-10:]), 2),
                    "final_acc": round(acc[-1], 2),
                    "paper": PAPER[method],
                    "round_s_median": round(statistics.median(t["round_time"] for t in timings), 2),
                    "train_s_median": round(statistics.median(t["train"] for t in timings), 2),
                    "total_min": round(sum(t["round_time"] for t in timings) / 60, 1),
                }
            )
    (HERE / "accuracy.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        "| method | seed | rounds | paper (%) | best (%) [round] | last-10 (%) | final (%) "
        "| round time, median (s) | of which client training (s) | total (min) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rounds = str(r["rounds"]) + ("" if r["finished"] else " (unfinished)")
        lines.append(
            f"| {r['method']} | {r['seed']} | {rounds} | {r['paper']:.2f} | {r['best_acc']:.2f} "
            f"[{r['best_round']}] | {r['last10_acc']:.2f} | {r['final_acc']:.2f} | {r['round_s_median']:.1f} "
            f"| {r['train_s_median']:.1f} | {r['total_min']:.1f} |"
        )
    (HERE / "accuracy.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    parts = sys.argv[1:] or ["attack", "accuracy"]
    if "attack" in parts:
        merge_attack()
    if "accuracy" in parts:
        accuracy()
