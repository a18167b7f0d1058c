"""How far each Fed-ZDA run's FedAvg rounds (1-79) drift from its FedAvg run's, and on which CPUs they ran.

Usage::

    python studies/fedzda/burnin_drift.py runs/fedzda_tables --out studies/fedzda/burnin_drift.json

A Fed-ZDAC/ZDAS run is FedAvg until ``start_round`` (80): started from the FedAvg run's checkpoint it copies
those rounds, and run from round 1 (the archive keeps no checkpoint) it computes them again, bit-identical on
the same kind of CPU and drifting on another (``fedaug.runtime.machine``). For every ``fedzdac``/``fedzdas`` run dir
under the root (any depth; the sweep's ``method.<option>=<value>/`` prefix is skipped to find the sibling
``<setting>/fedavg/seed<k>``), prints the two runs' CPU models (``env.json``; ``?``: not recorded), the first
round whose global test accuracy differs, and the difference (points) over rounds ``--from-round``..79: mean
± std and the largest in size. The paired gains in ``README.md`` compare a ZDA run with that FedAvg run.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from fedaug.engine.checkpoint import read_jsonl
from fedaug.runtime.machine import recorded_cpu


def accuracies(run_dir: Path) -> dict[int, float]:
    """Global test accuracy (fraction) of every round in ``metrics.jsonl``."""
    records = read_jsonl(run_dir / "metrics.jsonl")
    return {int(r["round"]): float(r["test/acc"]) for r in records if "test/acc" in r}


def fedavg_sibling(zda_dir: Path, root: Path) -> Path:
    """``<root>/<setting>/fedavg/seed<k>`` for ``<root>/[method.x=y/]<setting>/<method>/seed<k>``."""
    parts = zda_dir.relative_to(root).parts
    if parts[0].startswith("method."):
        parts = parts[1:]
    return root / parts[0] / "fedavg" / parts[-1]


def drift(zda_dir: Path, fedavg_dir: Path, *, from_round: int, last_round: int) -> dict[str, Any]:
    ours, theirs = accuracies(zda_dir), accuracies(fedavg_dir)
    shared = [r for r in range(1, last_round + 1) if r in ours and r in theirs]
    first = next((r for r in shared if ours[r] != theirs[r]), None)
    diffs = [100 * (ours[r] - theirs[r]) for r in shared if r >= from_round]
    return {
        "cpu": recorded_cpu(zda_dir) or "?",
        "fedavg_cpu": recorded_cpu(fedavg_dir) or "?",
        "first_different_round": first,
        "rounds": f"{from_round}-{last_round}",
        "mean_points": statistics.fmean(diffs) if diffs else None,
        "std_points": statistics.stdev(diffs) if len(diffs) > 1 else None,
        "largest_points": max(diffs, key=abs) if diffs else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the sweep's run root (runs/fedzda_tables)")
    parser.add_argument("--from-round", type=int, default=61)
    parser.add_argument("--last-round", type=int, default=79, help="the last FedAvg round (start_round - 1)")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    rows = {}
    for config in sorted(args.root.rglob("config.yaml")):
        run_dir = config.parent
        if run_dir.parent.name not in ("fedzdac", "fedzdas"):
            continue
        fedavg_dir = fedavg_sibling(run_dir, args.root)
        if not read_jsonl(fedavg_dir / "metrics.jsonl"):
            continue
        rows[str(run_dir.relative_to(args.root))] = drift(
            run_dir, fedavg_dir, from_round=args.from_round, last_round=args.last_round
        )
    span = f"{args.from_round}-{args.last_round}"
    print(f"| run | CPU (FedAvg run -> ZDA run) | first differing round | rounds {span}, points |")
    print("|---|---|---:|---|")
    for name, r in rows.items():
        first = r["first_different_round"] or "none"
        if r["mean_points"] is None:
            numbers = "–"
        else:
            numbers = (
                f"{r['mean_points']:+.2f} ± {r['std_points'] or 0:.2f} (largest {r['largest_points']:+.2f})"
            )
        print(f"| {name} | {r['fedavg_cpu']} -> {r['cpu']} | {first} | {numbers} |")
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
