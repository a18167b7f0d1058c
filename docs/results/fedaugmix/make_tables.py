"""Rebuilds the tables of docs/results/fedaugmix/ from the run directories (see README.md there).

    python docs/results/fedaugmix/make_tables.py              # both
    python docs/results/fedaugmix/make_tables.py accuracy     # or: attack

* attack/: the ``fedaug attack invert`` result lines of the listed out dirs, merged, and the table
  rebuilt with the CLI's own :func:`fedaug.attacks.invert_report.write_table` (skipped, keeping the
  committed files, when none of the out dirs exists: run dirs do not survive a machine change);
* table3/accuracy_zoom.png: the test accuracy of rounds 30-100 per method (mean over seeds, each seed thin),
  where the full-range curves of ``fedaug report --plots`` cannot separate the methods;
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
# out dir -> the stage name its rows get in the table (None: as written by the CLI)
STAGE_15R = "converged: FedAvg 15 rounds, 77.7%"
STAGE_100R = "converged: FedAvg 100 rounds, 98.55%"
ATTACK_DIRS: dict[str, str | None] = {
    "runs/attack_invert/lenet5_probe1000": None,  # LeNet-5, untrained, severity 0
    "runs/attack_invert/lenet5_grid/untrained": None,
    "runs/attack_invert/lenet5_grid/converged": STAGE_15R,
    "runs/attack_invert/lenet5_grid/converged_lsoff": STAGE_15R,
    "runs/attack_invert/mlp_grid": None,  # MLP, untrained, severities 0, 3, 10
    # the 100-round FedAvg run of the Table III sweep (seed 0): its ckpt/latest.pt
    "runs/attack_invert/lenet5_converged100": STAGE_100R,
}
RUNS = ROOT / "runs/fedaugmix_table3_mnist/mnist-dirichlet0.5-K100"
METHODS = ["fedavg", "fedaugmix", "fedprox", "fedprox_augmix"]
PAPER = {"fedavg": 95.63, "fedaugmix": 96.60, "fedprox": 95.88, "fedprox_augmix": 97.34}


def _key(row: dict[str, object]) -> tuple[object, ...]:
    names = ("model", "stage", "label", "batch", "seed", "iterations", "batch_size", "local_epochs", "tv")
    return tuple(row.get(k) for k in names)


def merge_attack() -> None:
    out = HERE / "attack"
    present = [d for d in ATTACK_DIRS if (ROOT / d).is_dir()]
    if not present:
        print(f"no attack out dirs under {ROOT / 'runs/attack_invert'}: {out} left as committed")
        return
    out.mkdir(exist_ok=True)
    for name in ("results.jsonl", "floors.jsonl"):
        committed = out / name  # rows of out dirs that are gone (another machine) stay
        rows = (
            [json.loads(x) for x in committed.read_text().splitlines() if x.strip()]
            if committed.exists()
            else []
        )
        for d in present:
            path = ROOT / d / name
            for line in path.read_text().splitlines() if path.exists() else []:
                row = json.loads(line)
                if ATTACK_DIRS[d] is not None and "stage" in row:
                    row["stage"] = ATTACK_DIRS[d]
                rows.append(row)
        # one row per attack (same setting, images and seed): the freshest is kept
        unique = {_key(row): row for row in rows}
        (out / name).write_text("".join(json.dumps(row) + "\n" for row in unique.values()))
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


def zoom() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for colour, method in zip(("C0", "C2", "C1", "C3"), METHODS, strict=True):
        curves = []
        for run in sorted((RUNS / method).glob("seed*")):
            if not (run / "summary.json").exists():
                continue
            acc = [json.loads(x)["test/acc"] * 100 for x in (run / "metrics.jsonl").read_text().splitlines()]
            curves.append(acc)
            ax.plot(range(30, len(acc) + 1), acc[29:], color=colour, lw=0.6, alpha=0.35)
        if curves:
            mean = [statistics.mean(v) for v in zip(*curves, strict=True)]
            label = f"{method} (mean of {len(curves)} seed{'s' if len(curves) > 1 else ''})"
            ax.plot(range(30, len(mean) + 1), mean[29:], color=colour, lw=1.8, label=label)
    ax.set(
        xlabel="round",
        ylabel="global test accuracy (%)",
        title="MNIST LeNet-5, Dir(0.5), K = 100: rounds 30-100",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out = HERE / "table3"
    out.mkdir(exist_ok=True)
    fig.savefig(out / "accuracy_zoom.png", dpi=120)


if __name__ == "__main__":
    parts = sys.argv[1:] or ["attack", "accuracy"]
    if "attack" in parts:
        merge_attack()
    if "accuracy" in parts:
        accuracy()
        zoom()
