"""Rebuilds the tables of studies/fedaugmix/ from the run directories (see README.md there).

    python studies/fedaugmix/make_tables.py              # both
    python studies/fedaugmix/make_tables.py accuracy     # or: attack

* attack/: the ``fedaug attack invert`` result lines of the listed out dirs, merged, and the table
  rebuilt with the CLI's own :func:`fedaug.attacks.invert_report.write_table` (skipped, keeping the
  committed files, when none of the out dirs exists: run dirs do not survive a machine change);
* table3/accuracy_zoom_seeds<seeds>.png: the test accuracy of rounds 30-100 per method (mean over seeds,
  each seed thin), where the full-range curves of ``fedaug report --plots`` cannot separate the methods;
* accuracy.md / accuracy.json: per run of the Table III sweep (``runs/fedaugmix_table3_mnist``, finished
  or not, and its archive ``table3/runs`` made by ``fedaug archive``), best, last-10 and final global test
  accuracy and the time per round, plus the mean +- std over the finished seeds beside the paper. Rows of
  runs whose dirs are gone (seeds 0 and 1 ran on a machine before ``fedaug archive`` existed) are kept from
  the committed accuracy.json.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from fedaug.attacks.invert_report import write_table
from fedaug.engine.checkpoint import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# out dir -> the stage name its rows get in the table (None: as written by the CLI)
STAGE_15R = "converged: FedAvg 15 rounds, 77.7%"
STAGE_100R = "converged: FedAvg 100 rounds, 98.55%"
STAGE_100R_S2 = "converged: FedAvg 100 rounds (seed 2), 98.43%"
ATTACK_DIRS: dict[str, str | None] = {
    "runs/attack_invert/lenet5_probe1000": None,  # LeNet-5, untrained, severity 0
    "runs/attack_invert/lenet5_grid/untrained": None,
    "runs/attack_invert/lenet5_grid/converged": STAGE_15R,
    "runs/attack_invert/lenet5_grid/converged_lsoff": STAGE_15R,
    "runs/attack_invert/mlp_grid": None,  # MLP, untrained, severities 0, 3, 10
    # the 100-round FedAvg run of the Table III sweep (seed 0): its ckpt/latest.pt
    "runs/attack_invert/lenet5_converged100": STAGE_100R,
    # the 100-round FedAvg run of seed 2 (2026-11-24): severities 0, 3, 10
    "runs/attack_invert/lenet5_converged100_seed2": STAGE_100R_S2,
}
RUNS = ROOT / "runs/fedaugmix_table3_mnist/mnist-dirichlet0.5-K100"
ARCHIVE = HERE / "table3/runs/mnist-dirichlet0.5-K100"  # fedaug archive runs/fedaugmix_table3_mnist --out ...
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


def _run_dirs(method: str) -> list[Path]:
    """The method's run dirs: live ones first, then archived seeds that are not live."""
    live = sorted((RUNS / method).glob("seed*"))
    names = {p.name for p in live}
    return live + [p for p in sorted((ARCHIVE / method).glob("seed*")) if p.name not in names]


def _run_row(method: str, run: Path) -> dict[str, object]:
    metrics = read_jsonl(run / "metrics.jsonl")
    timings = read_jsonl(run / "timings.jsonl")
    acc = [m["test/acc"] * 100 for m in metrics]
    return {
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


def _mean_std(values: list[float]) -> str:
    std = statistics.stdev(values) if len(values) > 1 else float("nan")
    return f"{statistics.mean(values):.2f} ± {std:.2f}"


def accuracy() -> None:
    committed = json.loads((HERE / "accuracy.json").read_text()) if (HERE / "accuracy.json").exists() else []
    by_key = {(r["method"], r["seed"]): r for r in committed}
    for method in METHODS:
        for run in _run_dirs(method):
            row = _run_row(method, run)
            by_key[(method, row["seed"])] = row
    rows = [by_key[k] for k in sorted(by_key, key=lambda k: (METHODS.index(k[0]), k[1]))]
    (HERE / "accuracy.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        "Mean ± std over the finished seeds (sample std):",
        "",
        "| method | paper (%) | seeds | best (%) | last-10 (%) | final (%) |",
        "|---|---|---|---|---|---|",
    ]
    for method in METHODS:
        done = [r for r in rows if r["method"] == method and r["finished"]]
        if done:
            seeds = ", ".join(str(r["seed"]) for r in done)
            cells = [_mean_std([float(r[k]) for r in done]) for k in ("best_acc", "last10_acc", "final_acc")]
            lines.append(f"| {method} | {PAPER[method]:.2f} | {seeds} | {' | '.join(cells)} |")
    lines += [
        "",
        "Per run:",
        "",
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
    seeds: set[str] = set()
    for colour, method in zip(("C0", "C2", "C1", "C3"), METHODS, strict=True):
        curves = []
        for run in _run_dirs(method):
            if not (run / "summary.json").exists():
                continue
            seeds.add(run.name[4:])
            acc = [m["test/acc"] * 100 for m in read_jsonl(run / "metrics.jsonl")]
            curves.append(acc)
            ax.plot(range(30, len(acc) + 1), acc[29:], color=colour, lw=0.6, alpha=0.35)
        if curves:
            mean = [statistics.mean(v) for v in zip(*curves, strict=True)]
            label = f"{method} (mean of {len(curves)} seeds)" if len(curves) > 1 else method
            ax.plot(range(30, len(mean) + 1), mean[29:], color=colour, lw=1.8, label=label)
    ax.set(
        xlabel="round",
        ylabel="global test accuracy (%)",
        title=f"MNIST LeNet-5, Dir(0.5), K = 100: rounds 30-100 (seed{'s' if len(seeds) > 1 else ''} "
        f"{', '.join(sorted(seeds))})",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out = HERE / "table3"
    out.mkdir(exist_ok=True)
    # one file per set of seeds: the curves of seeds 0 and 1 were lost with their machine, so their plot
    # (accuracy_zoom_seeds0-1.png) cannot be redrawn with later seeds
    fig.savefig(out / f"accuracy_zoom_seeds{'-'.join(sorted(seeds))}.png", dpi=120)


if __name__ == "__main__":
    parts = sys.argv[1:] or ["attack", "accuracy"]
    if "attack" in parts:
        merge_attack()
    if "accuracy" in parts:
        accuracy()
        zoom()
