"""How much of a run's class-level variance one class makes: the variance across classes with and without it.

Usage::

    python studies/fedzda/class_breakdown.py RUN_DIR [RUN_DIR ...] --drop 6 --from-round 80 \\
        --out studies/fedzda/class_breakdown_fmnist_multimodal_seed0.json

Reads each run's ``metrics.jsonl`` (``test/class_acc``, the global test accuracy of every class) and prints,
per run, the final round's variance across classes (%^2, population variance as ``test/class_acc_var``), the
same without class ``--drop``, that class's accuracy and the mean of the others; and the same averaged over
rounds ``--from-round``..last when the per-round vectors are there (a run dir under ``runs/``; archived runs
keep the vectors of the final round only). Written for Fashion-MNIST multimodal, where Shirt (class 6, held by
6 of 100 clients in seed 0) is at ~0% in every method (studies/fedzda/README.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from fedaug.engine.checkpoint import read_jsonl


def row(accuracies: list[float], drop: int) -> dict[str, float]:
    """Variance (%^2) across classes with and without class ``drop``, its accuracy, the others' mean (%)."""
    percent = [100 * a for a in accuracies]
    others = percent[:drop] + percent[drop + 1 :]
    return {
        "class_var": statistics.pvariance(percent),
        "class_var_without": statistics.pvariance(others),
        "dropped_acc": percent[drop],
        "others_mean": statistics.fmean(others),
    }


def breakdown(run_dir: Path, drop: int, from_round: int) -> dict[str, Any]:
    """The final round's :func:`row` and its mean over rounds ``from_round``.. (None without the vectors)."""
    records = read_jsonl(run_dir / "metrics.jsonl")
    window = [r for r in records if r["round"] >= from_round]
    with_vectors = [r for r in window if "test/class_acc" in r]
    mean = None
    if window and len(with_vectors) == len(window):
        rows = [row(r["test/class_acc"], drop) for r in with_vectors]
        mean = {key: statistics.fmean(r[key] for r in rows) for key in rows[0]}
    return {
        "run_dir": str(run_dir),
        "final": row(records[-1]["test/class_acc"], drop),
        "window_mean": mean,
        "rounds": [from_round, records[-1]["round"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", type=Path, nargs="+")
    parser.add_argument("--drop", type=int, required=True, help="the class left out")
    parser.add_argument("--from-round", type=int, default=80, help="first round of the averaged window")
    parser.add_argument("--out", type=Path, help="write the numbers as JSON here")
    args = parser.parse_args()
    results = [breakdown(run_dir, args.drop, args.from_round) for run_dir in args.run_dirs]
    head = f"class var / without class {args.drop} / its acc / others' mean"
    print(f"| run | final: {head} | rounds {args.from_round}-: same |")
    print("|---|---|---|")
    for result in results:
        final, mean = result["final"], result["window_mean"]
        cells = [" / ".join(f"{v:.1f}" for v in part.values()) if part else "-" for part in (final, mean)]
        print(f"| {result['run_dir']} | {cells[0]} | {cells[1]} |")
    if args.out:
        args.out.write_text(json.dumps({"drop": args.drop, "runs": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
